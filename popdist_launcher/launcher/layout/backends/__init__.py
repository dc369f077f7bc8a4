"""Backends: one module per way of placing instances (local, ssh, mpirun, srun), each saying
whether ``--backend auto`` may choose it and building itself from the layout's hosts and
options; ``registry.py`` lists them, ``base.py`` declares what they are, ``detect.py`` reads what
this host offers. A new backend is one module here and one line in the registry. They import
the rest of ``layout/`` (the plan, hosts, ssh options) and nothing above it."""
