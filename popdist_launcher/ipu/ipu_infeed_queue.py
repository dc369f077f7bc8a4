"""``ipu.ipu_infeed_queue``: IPUInfeedQueue, a dataset fed to a loop one element per iteration.

On an IPU the infeed streams a dataset to the device; here it is an iterator over the dataset that
``loops.repeat`` / ``pipelining_ops.pipeline`` dequeue from, once per iteration. TF1 graphs run
``initializer`` first (as on an IPU); eager and ``tf.function`` code need not. The replicas of a
replicated program read consecutive elements (replica r of R: r, R + r, ...), each through an
iterator of its own.
"""
from __future__ import annotations

import itertools
import logging
from typing import Any, Optional

import tensorflow as tf

from popdist_launcher.ipu._loop_support import REPLICA
from popdist_launcher.ipu_runtime import jit_functions

log = logging.getLogger(__name__)
_ids = itertools.count()


class IPUInfeedQueue:
    """Wraps a ``tf.data.Dataset`` whose elements have fully defined shapes (batch with
    ``drop_remainder=True``). ``prefetch_depth`` and ``optimise_latency`` tune the IPU data stream
    and have no effect here."""

    def __init__(self, dataset: tf.data.Dataset, device_ordinal: Optional[int] = None,
                 prefetch_depth: Optional[int] = None, optimise_latency: bool = False,
                 **kwargs: Any) -> None:
        if not isinstance(dataset, tf.data.Dataset):
            raise TypeError(
                f"IPUInfeedQueue needs a tf.data.Dataset, got {type(dataset).__name__}.")
        for spec in tf.nest.flatten(dataset.element_spec):
            if not isinstance(spec, tf.TensorSpec):
                raise TypeError(f"IPUInfeedQueue elements must be dense tensors, got {spec}.")
            if not spec.shape.is_fully_defined():
                raise ValueError(
                    f"Output shape {spec.shape} is not fully defined; if using "
                    f"tf.data.Dataset.batch, set drop_remainder=True.")
        prefetch_depth = 3 if prefetch_depth is None else prefetch_depth
        if not 0 < prefetch_depth < 256:
            raise ValueError(f"prefetch_depth must be in [1, 255], got {prefetch_depth}.")
        if device_ordinal is not None and (not isinstance(device_ordinal, int)
                                           or device_ordinal < 0):
            raise ValueError(f"device_ordinal must be an int >= 0, got {device_ordinal!r}.")
        jit_functions.install()
        self._dataset = dataset
        self._structure = dataset.element_spec
        self._device_ordinal = device_ordinal or 0
        self._id = kwargs.get("feed_name") or f"infeed_{next(_ids)}"
        self._dequeued = False
        self._initialized = False
        self._iterator = None
        self._replica_iterators = {}  # local replica -> its iterator, when several dequeue
        # TF1 graphs: (replicas, replica) -> the iterator of a replica of a replicated program
        self._program_iterators = {}
        self._initializers = []  # the initializer ops handed out (TF1), which start them all
        self._last_loop = None  # (program, output) of the last compiled loop on it (see loops)
        if not tf.executing_eagerly():
            with tf.device("/device:CPU:0"):
                self._iterator = tf.compat.v1.data.make_initializable_iterator(dataset)

    def _dequeue(self):
        """The next element (a nested structure of tensors); the loops call this once per
        iteration. Dequeued by several local replicas (``strategy.run`` of a replicated
        strategy), replica r of R reads elements r, R + r, 2R + r ..., as an IPU infeed feeds
        the replicas of a replicated program consecutive elements."""
        from popdist_launcher.ipu._loop_support import local_replica
        jit_functions.host_operation("IPUInfeedQueue")
        self._dequeued = True
        replica, replicas = local_replica()
        if replicas > 1 and REPLICA.get() is not None:
            return self._program_iterator(replica, replicas).get_next()
        if replicas > 1 and replica >= 0 and tf.compat.v1.executing_eagerly_outside_functions():
            iterator = self._replica_iterators.get(replica)
            if iterator is None:
                with tf.init_scope(), tf.device("/device:CPU:0"):
                    iterator = iter(self._dataset.shard(replicas, replica))
                self._replica_iterators[replica] = iterator
            return iterator.get_next()
        if self._iterator is None:
            with tf.init_scope(), tf.device("/device:CPU:0"):
                self._iterator = iter(self._dataset)
        return self._iterator.get_next()

    def _program_iterator(self, replica: int, replicas: int):
        """The iterator of replica ``replica`` of a replicated program in a TF1 graph (made on
        first use, and started by every ``initializer`` op, also those handed out before)."""
        iterator = self._program_iterators.get((replicas, replica))
        if iterator is None:
            with tf.init_scope(), tf.device("/device:CPU:0"):
                iterator = tf.compat.v1.data.make_initializable_iterator(
                    self._dataset.shard(replicas, replica))
            self._program_iterators[(replicas, replica)] = iterator
            for initializer in self._initializers:
                initializer._add_control_inputs([iterator.initializer])  # noqa: SLF001
        return iterator

    @property
    def dequeued(self) -> bool:
        """Whether a loop has dequeued from this queue."""
        return self._dequeued

    @property
    def number_of_tuple_elements(self) -> int:
        """How many arguments a loop body receives from this queue."""
        from popdist_launcher.ipu._loop_support import body_arguments
        args, kwargs = body_arguments(self._structure)
        return len(args) + len(kwargs)

    @property
    def initializer(self):
        """TF1: the op that (re)starts the dataset; it can be taken once, as on an IPU. Eager:
        restarts the dataset now and returns None."""
        if tf.executing_eagerly():
            self._initialized = True
            with tf.device("/device:CPU:0"):
                self._iterator = iter(self._dataset)
            self._replica_iterators = {}
            return None
        if self._initialized:
            raise ValueError("The IPUInfeedQueue `initializer` function can only be accessed once.")
        self._initialized = True
        starts = [self._iterator.initializer] + [iterator.initializer for iterator
                                                  in self._program_iterators.values()]
        with tf.init_scope():
            initializer = tf.group(*starts, name=f"{self._id}_initializer")
        self._initializers.append(initializer)
        return initializer

    @property
    def deleter(self):
        """Releases the iterator, so the dataset can be fed again from its start."""
        if tf.executing_eagerly():
            self._iterator = None
            self._replica_iterators = {}
            return None
        return tf.no_op(name=f"{self._id}_deleter")

    def get_next(self):
        raise ValueError("`get_next()` is obsolete: an IPUInfeedQueue is dequeued by the loop "
                         "it is passed to (ipu.loops.repeat(n, body, inputs, infeed_queue)).")

    def __iter__(self):
        """Eager: iterate the dataset's elements, as a dataset iterator would."""
        if self._iterator is None or not hasattr(self._iterator, "__next__"):
            self._iterator = iter(self._dataset)
        return self._iterator


class IPUIterator:
    """Graphcore's ``IPUIterator``: an iterator over a dataset through an IPUInfeedQueue, for
    ``next(iterator)`` inside the functions a strategy runs (``strategy.run(step, args=[it])``).
    Each ``next`` is one dequeue: in a ``tf.function`` it is traced once and every call of the
    function reads the next element; with several local replicas, replica r of R reads elements
    r, R + r, ... (IPUInfeedQueue's rule). ``kwargs`` go to the IPUInfeedQueue. Graphcore's
    other constructor (``infeed_spec`` and ``element_spec``, which rebuilds an iterator from its
    parts inside TensorFlow) is refused: here the iterator is passed to functions as itself."""

    def __init__(self, dataset: Optional[tf.data.Dataset] = None, infeed_spec: Any = None,
                 element_spec: Any = None, **kwargs: Any) -> None:
        if dataset is None or infeed_spec is not None or element_spec is not None:
            raise ValueError("IPUIterator needs a tf.data.Dataset (`dataset=`); building one from "
                             "`infeed_spec` and `element_spec` is not supported here.")
        self._infeed_queue = IPUInfeedQueue(dataset, **kwargs)

    @property
    def element_spec(self):
        """The structure of TypeSpecs of the dataset's elements."""
        return self._infeed_queue._structure

    def get_next(self):
        """The next element (a nested structure of tensors)."""
        return self._infeed_queue._dequeue()

    def __next__(self):
        return self.get_next()

    def __iter__(self):
        return self
