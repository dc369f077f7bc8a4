"""What only the command line (``popdist_launcher/launch.py``) uses: click's checks of single
option values (``cli_values.py``), ``--config`` files (``config_file.py``) and the peers'
spellings of options (``peer_options.py``: PopRun's, horovodrun's, mpirun's). It is the top of
the launcher: it may import any folder of it (it needs none today), and nothing in the launcher
imports it."""
