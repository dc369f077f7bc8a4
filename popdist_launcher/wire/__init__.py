"""What the launcher's processes say to each other: the wrapper's frames, the rendezvous helper,
network facts, the placement text and the Horovod helper's frames and settings. Imports nothing
of the launcher, the wrapper, the helper or the collectives."""
