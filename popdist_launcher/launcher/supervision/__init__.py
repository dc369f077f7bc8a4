"""One attempt of a job, supervised: its states and records (``attempt.py``), the event loop
(``loop.py``), the world it runs (``world.py``), the wrappers' connections (``hub.py``), the
processes it starts and their process groups (``spawner.py``, ``processes.py``), stdin
forwarding, stack collection, the attempt's closing text (``attempt_end.py``), the hang check
(``hang/``) and the supervisor that owns them all (``supervisor.py``). It imports ``output/``,
``spawned/`` and ``layout/`` (the plan, the backends' interface), and nothing of the elastic
folder, the options or the agents above it."""
