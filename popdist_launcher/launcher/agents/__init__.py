"""The agents, each running a whole job from its JobOptions: the fixed-world agent, and the two
elastic ones (elastic restarts, Horovod's elastic protocol) that take its shape."""
