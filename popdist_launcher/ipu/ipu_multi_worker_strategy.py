"""``ipu.ipu_multi_worker_strategy``: IPUMultiWorkerStrategy at its IPU module path."""
from popdist_launcher.strategies.ipu_multi_worker_strategy import IPUMultiWorkerStrategy  # noqa: F401
