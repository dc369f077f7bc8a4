"""Whether a tf.data pipeline shards its input: the strategies warn when an instance's dataset is
not sharded, and the IPUEstimator checks an ``input_fn``'s dataset, the same way."""
from __future__ import annotations


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
