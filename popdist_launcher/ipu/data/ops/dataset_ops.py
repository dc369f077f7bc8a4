"""``ipu.data.ops.dataset_ops.BufferDataset``: the input dataset's elements, in order, with
``buffer_size`` of them prepared ahead (a prefetch buffer on the host)."""
from __future__ import annotations

import tensorflow as tf
from tensorflow.python.data.ops import dataset_ops
from tensorflow.python.ops import gen_dataset_ops


class BufferDataset(dataset_ops.UnaryUnchangedStructureDataset):
    """A dataset that keeps ``buffer_size`` elements of ``input_dataset`` ready, as Graphcore's
    keeps them ready for the IPU's infeed; the elements are unchanged."""

    def __init__(self, input_dataset: tf.data.Dataset, buffer_size) -> None:
        self._input_dataset = input_dataset
        self._buffer_size = tf.convert_to_tensor(buffer_size, dtype=tf.int64, name="buffer_size")
        variant = gen_dataset_ops.prefetch_dataset(
            input_dataset._variant_tensor,  # noqa: SLF001 (how tf.data wraps a dataset)
            buffer_size=self._buffer_size, **self._flat_structure)
        super().__init__(input_dataset, variant)
