"""Whether a tf.data pipeline shards its input, and the one warning the strategies and the
IPUEstimator give, once, when an instance's dataset is not sharded across instances."""
from __future__ import annotations

import logging


def is_sharded(dataset) -> bool:
    """True when ``dataset.shard(...)`` is part of the dataset's pipeline."""
    pending, seen = [dataset], set()
    while pending:
        ds = pending.pop()
        if id(ds) in seen:
            continue
        seen.add(id(ds))
        if "Shard" in type(ds).__name__:
            return True
        try:
            pending.extend(ds._inputs())  # noqa: SLF001 - tf.data's own pipeline walk
        except (AttributeError, NotImplementedError):
            pass
    return False


class UnshardedInputWarning:
    """Says once, on instance 0 of two or more, that a dataset is not sharded across instances,
    so that every instance reads all of it (as with Graphcore's, nothing shards it for them).
    ``message`` is a ``str.format`` template; ``{instances}`` is the number of instances."""

    def __init__(self, logger: logging.Logger, message: str) -> None:
        self._logger = logger
        self._message = message
        self._given = False

    def check(self, dataset, num_instances: int, instance_index: int) -> None:
        if self._given or num_instances == 1 or instance_index != 0 or is_sharded(dataset):
            return
        self._given = True
        self._logger.warning(self._message.format(instances=num_instances))
