"""Everything that runs inside ``poprun-lite``, in folders by concept, lowest first: ``output/``
(the launcher's own lines, output routing, reports), ``spawned/`` (what runs in other
processes), ``layout/`` (hosts, ports, the plan, the backends), ``supervision/`` (one attempt's
processes, its event loop and the hang check), ``elastic/`` (elastic jobs' discovery, policy,
membership and Horovod's driver helper), then ``options.py`` here (the job's options, where
every folder's settings meet), ``agents/`` (the agents that run a job from its options) and
``cli/`` (what only the command line uses). A folder imports only folders before it in this
list; ``tests/test_code_shape.py``'s ``LAUNCHER_LAYERS`` checks it."""
