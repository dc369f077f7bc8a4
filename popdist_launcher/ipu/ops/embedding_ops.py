"""``ipu.embedding_ops``: Graphcore's embedding lookup, a gather of rows here, and its host
embeddings (tables on the host, updated there). ``serialization_factor`` (splitting the lookup to
save IPU memory) is checked as Graphcore checks it and changes no number."""
from __future__ import annotations

from typing import Optional

import tensorflow as tf

from popdist_launcher.ipu.ops._host_embedding import (  # noqa: F401 (Graphcore's names here)
    HostEmbedding, HostEmbeddingOptimizerSpec, HostEmbeddingSGDGAOptimizerSpec,
    create_host_embedding)


def embedding_lookup(params, ids, serialization_factor: int = 1, indices_are_sorted: bool = False,
                     name: Optional[str] = None):
    """The rows of ``params`` at ``ids`` (``tf.nn.embedding_lookup`` of one tensor): shape
    ``ids.shape + params.shape[1:]``."""
    serialization_factor = int(serialization_factor)
    if serialization_factor < 1:
        raise ValueError(f"serialization_factor has to be at least 1, but was "
                         f"{serialization_factor}.")
    rows = params.shape[0]
    if rows is not None and rows % serialization_factor:
        raise ValueError(f"The serialization_factor ({serialization_factor}) must divide the size "
                         f"of the 0th dimension of params ({rows}).")
    with tf.name_scope(name or "embedding_lookup"):
        return tf.gather(params, ids)
