"""What runs around the user's program in its own process: the per-instance wrapper, its program,
its CPU placement and its peer sockets."""
