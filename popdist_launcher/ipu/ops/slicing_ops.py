"""``ipu.slicing_ops``: copy runs of rows (the outer dimension) between tensors: run i is
``num_elems[i]`` rows from ``src_offsets[i]`` of the source to ``dst_offsets[i]`` of the
destination."""
from __future__ import annotations

import tensorflow as tf


def _rows(offsets, counts) -> tf.Tensor:
    return tf.ragged.range(offsets, offsets + counts).flat_values


def _runs(*vectors):
    vectors = [tf.cast(tf.convert_to_tensor(v), tf.int32) for v in vectors]
    n = vectors[0].shape[0]
    if n == 0 or any(v.shape.rank != 1 or v.shape[0] != n for v in vectors):
        raise ValueError("num_elems and the offsets must have matching, nonzero shapes of rank 1.")
    return vectors


def _copy(dst, src, src_rows, dst_rows, zero_unused: bool):
    dst, src = tf.convert_to_tensor(dst), tf.convert_to_tensor(src)
    if src.shape[1:] != dst.shape[1:]:
        raise ValueError("src and dst inner shapes must match.")
    base = tf.zeros_like(dst) if zero_unused else dst
    return tf.tensor_scatter_nd_update(base, dst_rows[:, None], tf.gather(src, src_rows))


def sequence_slice(dst, src, num_elems, src_offsets, dst_offsets, zero_unused: bool):
    """``dst`` with each run of rows copied from ``src`` (other rows zero with ``zero_unused``)."""
    num_elems, src_offsets, dst_offsets = _runs(num_elems, src_offsets, dst_offsets)
    return _copy(dst, src, _rows(src_offsets, num_elems), _rows(dst_offsets, num_elems),
                 zero_unused)


def sequence_slice_unpack(src, num_elems, src_offsets, total_elements: int):
    """``total_elements`` rows: the runs of ``src`` one after the other."""
    num_elems, src_offsets = _runs(num_elems, src_offsets)
    src = tf.convert_to_tensor(src)
    dst = tf.zeros(tf.concat([[total_elements], tf.shape(src)[1:]], 0), src.dtype)
    starts = tf.cumsum(num_elems, exclusive=True)
    return _copy(dst, src, _rows(src_offsets, num_elems), _rows(starts, num_elems), False)


def sequence_slice_pack(dst, src, num_elems, dst_offsets, zero_unused: bool):
    """``dst`` with consecutive runs of ``src`` (as ``sequence_slice_unpack`` makes them) copied
    to ``dst_offsets``."""
    num_elems, dst_offsets = _runs(num_elems, dst_offsets)
    starts = tf.cumsum(num_elems, exclusive=True)
    return _copy(dst, src, _rows(starts, num_elems), _rows(dst_offsets, num_elems), zero_unused)
