"""``ipu.slicing_ops``: copy runs of rows (the outer dimension) between tensors: run i is
``num_elems[i]`` rows from ``src_offsets[i]`` of the source to ``dst_offsets[i]`` of the
destination."""
from __future__ import annotations

import tensorflow as tf


def _runs(*vectors):
    vectors = [tf.cast(tf.convert_to_tensor(v), tf.int32) for v in vectors]
    n = vectors[0].shape[0]
    if n == 0 or any(v.shape.rank != 1 or v.shape[0] != n for v in vectors):
        raise ValueError("num_elems and the offsets must have matching, nonzero shapes of rank 1.")
    return vectors


def _copy(dst, src, num_elems, src_offsets, dst_offsets, zero_unused: bool):
    """Row j of ``dst`` in run i (the last run that covers it) becomes row
    ``src_offsets[i] + j - dst_offsets[i]`` of ``src``; dense ops only, so it compiles with XLA."""
    dst, src = tf.convert_to_tensor(dst), tf.convert_to_tensor(src)
    if src.shape[1:] != dst.shape[1:]:
        raise ValueError("src and dst inner shapes must match.")
    rows = tf.range(tf.shape(dst)[0])
    inside = ((rows[None, :] >= dst_offsets[:, None])
              & (rows[None, :] < dst_offsets[:, None] + num_elems[:, None]))  # [runs, dst rows]
    runs = tf.range(tf.shape(num_elems)[0])[:, None]
    run = tf.reduce_max(tf.where(inside, runs, -1), axis=0)
    covered = tf.reshape(run >= 0, tf.concat([[-1], tf.ones_like(tf.shape(dst)[1:])], 0))
    run = tf.maximum(run, 0)
    source = tf.gather(src_offsets, run) + rows - tf.gather(dst_offsets, run)
    copied = tf.gather(src, tf.clip_by_value(source, 0, tf.shape(src)[0] - 1))
    return tf.where(covered, copied, tf.zeros_like(dst) if zero_unused else dst)


def sequence_slice(dst, src, num_elems, src_offsets, dst_offsets, zero_unused: bool):
    """``dst`` with each run of rows copied from ``src`` (other rows zero with ``zero_unused``)."""
    num_elems, src_offsets, dst_offsets = _runs(num_elems, src_offsets, dst_offsets)
    return _copy(dst, src, num_elems, src_offsets, dst_offsets, zero_unused)


def sequence_slice_unpack(src, num_elems, src_offsets, total_elements: int):
    """``total_elements`` rows: the runs of ``src`` one after the other."""
    num_elems, src_offsets = _runs(num_elems, src_offsets)
    src = tf.convert_to_tensor(src)
    dst = tf.zeros(tf.concat([[total_elements], tf.shape(src)[1:]], 0), src.dtype)
    starts = tf.cumsum(num_elems, exclusive=True)
    return _copy(dst, src, num_elems, src_offsets, starts, False)


def sequence_slice_pack(dst, src, num_elems, dst_offsets, zero_unused: bool):
    """``dst`` with consecutive runs of ``src`` (as ``sequence_slice_unpack`` makes them) copied
    to ``dst_offsets``."""
    num_elems, dst_offsets = _runs(num_elems, dst_offsets)
    starts = tf.cumsum(num_elems, exclusive=True)
    return _copy(dst, src, num_elems, starts, dst_offsets, zero_unused)
