"""What runs in processes other than the launcher: the per-instance wrapper and its wire format."""
