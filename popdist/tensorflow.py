"""``popdist.tensorflow``: fill an IPU configuration from the launch (Graphcore's function)."""
from __future__ import annotations

from typing import Any, Optional


def set_ipu_config(config: Any, ipus_per_replica: Optional[int] = None,
                   configure_device: bool = True) -> Any:
    """Set ``config.experimental.multi_replica_distribution`` (process_count, process_index)
    for this instance and, with ``configure_device``, select this instance's
    num_local_replicas x ipus_per_replica devices. Returns ``config``.

    ``config`` is an ``ipu.config.IPUConfig`` (``from tensorflow.python import ipu`` or
    ``from popdist_launcher import ipu``). ``ipus_per_replica`` defaults to the launch's
    ``--ipus-per-replica``.
    """
    from popdist_launcher.ipu_runtime.config import set_ipu_config as _set

    return _set(config, ipus_per_replica=ipus_per_replica, configure_device=configure_device)


__all__ = ["set_ipu_config"]
