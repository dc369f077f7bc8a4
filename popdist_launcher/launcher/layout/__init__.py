"""Where the instances run and what each is given: host lists (``hosts.py``), programs on PATH
(``executables.py``), ports and their host-wide locks (``ports.py``), ssh command lines and the
host probe run over them (``remote.py``, ``host_probe.py``), the frozen launch plan
(``plan.py``), the backends that start the instances (``backends/``, one module each, listed in
``backends/registry.py``) and the layout that puts them together for each attempt
(``topology.py``). It imports ``output/`` (the launcher's console), ``wire/`` and
``tf_config``, and nothing of the supervision, the elastic folder or the agents above it."""
