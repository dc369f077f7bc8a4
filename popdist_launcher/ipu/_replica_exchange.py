"""How the replicas of one replicated ``ipu_compiler.compile`` program (TF1 graphs) exchange
tensors: every collective (``cross_replica_sum``, ``all_gather``, ``reduce_scatter`` ...) is a
gather of one tensor from every replica, carried at run time by host queues.

The replicas are built one after the other, each its own copy of the program (loops included),
so a collective cannot be joined while the graph is built; at run time the copies run side by
side and meet in the queues, as IPU replicas meet in their collectives. The n-th collective
each replica builds is the same collective (the copies build the same program in the same
order); replica s sends to replica d through a queue of their own, so each receives the
senders' values of one step in order, however far ahead one replica runs.
"""
from __future__ import annotations

import itertools
from typing import List

import tensorflow as tf

_ids = itertools.count()


class Exchange:
    """The collectives of one build of a replicated program: ``gather`` in replica r's copy
    gives every replica's value of the tensor, row s being replica s's."""

    def __init__(self, replicas: int) -> None:
        self._replicas = replicas
        self._sites: List[list] = []  # per collective: queues[sender][receiver], and its spec
        self._built = [0] * replicas  # collectives each replica has built so far
        self._id = next(_ids)

    @property
    def replicas(self) -> int:
        return self._replicas

    def gather(self, replica: int, x) -> tf.Tensor:
        """``[replicas, *x.shape]``: row s is replica s's ``x`` at this collective (the n-th
        that replica ``replica`` builds). Differentiable: the gradient of replica r's ``x`` is
        the sum over the receivers of their gradient's row r."""
        x = tf.convert_to_tensor(x)
        exchange = self

        @tf.custom_gradient
        def gathered(value):
            def grad(upstream):
                rows = exchange.gather(replica, upstream)  # [receivers, senders, ...]
                return tf.reduce_sum(rows[:, replica], axis=0)
            return exchange.send_and_receive(replica, value), grad

        return gathered(x)

    def send_and_receive(self, replica: int, x: tf.Tensor) -> tf.Tensor:
        """Send ``x`` to every replica and receive every replica's value of this collective."""
        site, queues = self._site(replica, x)
        sends = [queues[replica][receiver].enqueue(x) for receiver in range(self._replicas)]
        with tf.control_dependencies(sends):
            rows = [queues[sender][replica].dequeue() for sender in range(self._replicas)]
        result = tf.stack(rows)
        result.set_shape(tf.TensorShape([self._replicas]).concatenate(x.shape))
        return result

    def _site(self, replica: int, x: tf.Tensor):
        index = self._built[replica]
        self._built[replica] += 1
        if index == len(self._sites):
            self._sites.append(self._new_site(index, x))
        spec, queues = self._sites[index]
        if x.dtype != spec.dtype or not x.shape.is_compatible_with(spec.shape):
            raise ValueError(
                f"replica {replica}'s collective number {index + 1} exchanges a {x.dtype.name} "
                f"tensor of shape {x.shape} where replica 0's exchanges {spec.dtype.name} "
                f"{spec.shape}: the replicas of an IPU program must run the same collectives "
                f"in the same order.")
        return index, queues

    def _new_site(self, index: int, x: tf.Tensor):
        spec = tf.TensorSpec(x.shape, x.dtype)
        shapes = [x.shape] if x.shape.is_fully_defined() else None
        with tf.init_scope(), tf.device("/device:CPU:0"):
            queues = [[tf.queue.FIFOQueue(2 ** 31 - 1, [x.dtype], shapes=shapes,
                                          name=f"replica_exchange_{self._id}_{index}_{s}_{d}")
                       for d in range(self._replicas)] for s in range(self._replicas)]
        return spec, queues
