"""Setting up and checking an environment for this package, in the user's own environment or
in ``make setup``'s virtualenv: ``poprun-lite --check-build``'s report of what is installed and
what each missing piece costs (``check_build``), and ``python -m popdist_launcher.install
horovod``, which builds Horovod against the environment's TensorFlow (``horovod_build``).
Neither imports TensorFlow or Horovod into its own process: they probe in a child interpreter
or read files. Stands on the launcher's executables lookup and MPI detection only."""
