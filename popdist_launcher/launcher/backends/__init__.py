"""Backends: one module per way of placing instances (local, ssh, mpirun, srun)."""
