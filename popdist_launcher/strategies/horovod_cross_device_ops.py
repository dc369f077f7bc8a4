"""Cross-device reductions over all global replicas: first within the instance, then across
instances with Horovod. The data plane of PopDistStrategy and IPUHorovodStrategy."""
from __future__ import annotations

from typing import List, Sequence

import tensorflow as tf

from popdist_launcher import collectives
from popdist_launcher.ipu_runtime.tf_internal import (cross_device_ops_lib, reduce_util,
                                                      values_lib)

# dtypes whose MEAN Horovod's allreduce divides (postscale_factor); others are divided after it.
_SCALED_IN_HOROVOD = (tf.float16, tf.float32, tf.float64)


def _local_parts(value) -> list:
    if isinstance(value, values_lib.DistributedValues):
        return list(value.values)
    return [value]


class HorovodAllReduce(cross_device_ops_lib.CrossDeviceOps):
    """SUM / MEAN over every replica of every instance.

    Each reduction adds this instance's replica values on the host device, then sums the
    instances' partial results with one grouped Horovod allreduce (IndexedSlices are gathered),
    and finally copies the result to the destination devices. MEAN divides by the number of
    global replicas (integers: floor division, as TensorFlow does).
    """

    def __init__(self, num_instances: int, num_global_replicas: int, host_device: str) -> None:
        super().__init__()
        self._num_instances = num_instances
        self._num_global_replicas = num_global_replicas
        self._host = host_device

    @property
    def _num_between_graph_workers(self) -> int:
        # More than one: never take TensorFlow's shortcut for single-device values.
        return max(2, self._num_instances)

    def reduce_implementation(self, reduce_op, per_replica_value, destinations, options):
        return self.batch_reduce_implementation(
            reduce_op, [(per_replica_value, destinations)], options)[0]

    def batch_reduce_implementation(self, reduce_op, value_destination_pairs, options):
        reduced = self.all_reduce([value for value, _ in value_destination_pairs], reduce_op)
        return [cross_device_ops_lib.simple_broadcast(r, d, always_mirrored=True)
                for r, (_, d) in zip(reduced, value_destination_pairs)]

    def all_reduce(self, values: Sequence, reduce_op) -> List:
        """Reduce each value over all global replicas; results on the host device."""
        results: List = [None] * len(values)
        dense_positions, dense_tensors = [], []
        with tf.device(self._host):
            for i, value in enumerate(values):
                parts = _local_parts(value)
                if isinstance(parts[0], tf.IndexedSlices):
                    results[i] = self._reduce_sparse(parts, reduce_op)
                else:
                    local = parts[0] if len(parts) == 1 else tf.add_n(parts)
                    dense_positions.append(i)
                    dense_tensors.append(tf.identity(local))
            mean = reduce_op == reduce_util.ReduceOp.MEAN
            for i, tensor in zip(dense_positions, self._reduce_dense(dense_tensors, mean)):
                results[i] = tensor
        return results

    def _reduce_dense(self, tensors: List[tf.Tensor], mean: bool) -> List[tf.Tensor]:
        """Sum over instances, then MEAN's division. Floating-point tensors are divided inside
        Horovod's allreduce (its postscale, as plain Horovod's Average): no op per tensor."""
        if self._num_instances == 1:
            return [self._mean(t) for t in tensors] if mean else list(tensors)
        results: List = [None] * len(tensors)
        for scaled in (True, False):
            positions = [i for i, t in enumerate(tensors)
                         if (t.dtype in _SCALED_IN_HOROVOD) == scaled]
            if not positions:
                continue
            postscale = 1.0 / self._num_global_replicas if mean and scaled else 1.0
            summed = collectives.grouped_allreduce([tensors[i] for i in positions],
                                                   op=collectives.Sum, postscale_factor=postscale)
            for i, tensor in zip(positions, summed):
                results[i] = self._mean(tensor) if mean and not scaled else tensor
        return results

    def _reduce_sparse(self, parts: list, reduce_op) -> tf.IndexedSlices:
        values = tf.concat([p.values for p in parts], axis=0)
        indices = tf.concat([p.indices for p in parts], axis=0)
        if self._num_instances > 1:
            values = collectives.allgather(values)
            indices = collectives.allgather(indices)
        if reduce_op == reduce_util.ReduceOp.MEAN:
            values = self._mean(values)
        return tf.IndexedSlices(values, indices, parts[0].dense_shape)

    def _mean(self, tensor):
        if self._num_global_replicas == 1:
            return tensor
        if tensor.dtype.is_integer:
            return tf.math.floordiv(tensor, tf.cast(self._num_global_replicas, tensor.dtype))
        return tensor * tf.cast(1.0 / self._num_global_replicas, tensor.dtype)

    def _gather_implementation(self, per_replica_value, destinations, axis, options):
        with tf.device(self._host):
            parts = _local_parts(per_replica_value)
            local = tf.concat(parts, axis=axis) if len(parts) > 1 else tf.identity(parts[0])
            if self._num_instances > 1:
                rank = local.shape.rank
                perm = [axis] + [d for d in range(rank) if d != axis]
                inverse = [perm.index(d) for d in range(rank)]
                gathered = collectives.allgather(tf.transpose(local, perm))
                local = tf.transpose(gathered, inverse)
        return cross_device_ops_lib.simple_broadcast(local, destinations, always_mirrored=True)
