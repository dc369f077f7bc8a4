"""``ipu.ipu_outfeed_queue``: IPUOutfeedQueue, values a loop hands back to the host.

``enqueue`` inside a loop body appends the values to a host-side FIFO queue (created on the
first enqueue, outside any loop or function); ``dequeue`` returns everything enqueued since the
last dequeue, stacked on a new first axis (``IPUOutfeedMode.ALL``), or only the last element
(``IPUOutfeedMode.LAST``), as Graphcore's does with one replica.
"""
from __future__ import annotations

import enum
import itertools
import logging
from typing import Any, Optional

import tensorflow as tf

log = logging.getLogger(__name__)
_ids = itertools.count()
_CAPACITY = 2 ** 31 - 1


class IPUOutfeedMode(enum.Enum):
    """ALL: dequeue returns every enqueued element; LAST: only the most recent."""
    ALL = "all"
    LAST = "get_last"


class IPUOutfeedQueue:
    """A host-side queue of the values a loop enqueues. ``buffer_depth`` and ``optimise_latency``
    tune the IPU data stream and have no effect here."""

    def __init__(self, outfeed_mode: Optional[IPUOutfeedMode] = None,
                 device_ordinal: Optional[int] = None, buffer_depth: int = 3,
                 optimise_latency: bool = False) -> None:
        self._outfeed_mode = outfeed_mode or IPUOutfeedMode.ALL
        if not isinstance(self._outfeed_mode, IPUOutfeedMode):
            raise ValueError(f"Expected `outfeed_mode` value to be of "
                             f"`ipu_outfeed_queue.IPUOutfeedMode` type, but is {outfeed_mode!r}.")
        if device_ordinal is not None and (not isinstance(device_ordinal, int) or device_ordinal < 0):
            raise ValueError(f"device_ordinal must be an int >= 0, got {device_ordinal!r}.")
        if buffer_depth <= 0:
            raise ValueError(f"Outfeed buffer depth cannot be less than 1, got {buffer_depth}.")
        self._device_ordinal = device_ordinal or 0
        self._feed_name = f"outfeed_{next(_ids)}"
        self._structure = None
        self._queue = None

    @property
    def enqueued(self) -> bool:
        """Whether a loop body has enqueued into this queue."""
        return self._queue is not None

    def enqueue(self, tensors: Any):
        """Append ``tensors`` (a tensor, or a list, tuple or dict of them); returns the op."""
        context = tf.distribute.get_replica_context() if tf.distribute.has_strategy() else None
        if context is not None and len(context.strategy.extended.worker_devices) > 1:
            raise NotImplementedError(
                "IPUOutfeedQueue.enqueue from a strategy with several local replicas is not "
                "supported here (Graphcore's would add a replica axis); enqueue from one replica, "
                "or return the values from strategy.run instead.")
        flat = [tf.convert_to_tensor(t) for t in tf.nest.flatten(tensors)]
        if self._queue is None:
            self._structure = tensors
            with tf.init_scope(), tf.device("/device:CPU:0"):
                self._queue = tf.queue.FIFOQueue(
                    _CAPACITY, [t.dtype for t in flat], shapes=[t.shape for t in flat],
                    name=self._feed_name)
        else:
            try:
                tf.nest.assert_same_structure(self._structure, tensors)
            except (ValueError, TypeError) as exc:
                raise ValueError(f"every enqueue into an IPUOutfeedQueue must have the structure "
                                 f"of the first ({exc}).") from None
        with tf.device("/device:CPU:0"):
            return self._queue.enqueue(flat)

    def dequeue(self, wait_for_completion: bool = False):
        """Everything enqueued since the last dequeue: each tensor stacked on a new first axis
        (ALL; empty arrays when nothing was enqueued), or the last element enqueued (LAST; again
        on the next dequeue until a newer one arrives; an error when nothing was enqueued)."""
        if self._queue is None:
            raise ValueError("Trying to dequeue an outfeed which has not been enqueued.")
        with tf.device("/device:CPU:0"):
            flat = self._queue.dequeue_many(self._queue.size())
            flat = flat if isinstance(flat, (list, tuple)) else [flat]
            if self._outfeed_mode == IPUOutfeedMode.LAST:
                last = [t[-1] for t in flat]
                with tf.control_dependencies([self._queue.enqueue(last)]):  # it stays the last
                    flat = [tf.identity(t) for t in last]
        return tf.nest.pack_sequence_as(self._structure, list(flat))

    @property
    def deleter(self):
        """Eager: forget this queue's values and structure now (a new enqueue starts a new
        queue). Graph mode: an op that drops the values enqueued so far."""
        if tf.executing_eagerly() or self._queue is None:
            self._delete()
            return None if tf.executing_eagerly() else tf.no_op(name=f"{self._feed_name}_deleter")
        with tf.device("/device:CPU:0"):
            drained = self._queue.dequeue_many(self._queue.size())
        return tf.group(*tf.nest.flatten(drained), name=f"{self._feed_name}_deleter")

    def _delete(self) -> None:
        self._queue = None
        self._structure = None

    def __iter__(self):
        """Eager, mode ALL: the dequeued elements one by one."""
        if not tf.executing_eagerly():
            raise RuntimeError("IPUOutfeedQueue can only be iterated over in eager mode.")
        if self._outfeed_mode != IPUOutfeedMode.ALL:
            raise RuntimeError("IPUOutfeedQueue can only be iterated over if the `outfeed_mode` "
                               "is set to 'IPUOutfeedMode.ALL'.")
        if self._queue is None:
            return iter(())
        values = self.dequeue()
        flat = tf.nest.flatten(values)
        count = int(flat[0].shape[0]) if flat else 0
        return (tf.nest.pack_sequence_as(self._structure, [t[i] for t in flat])
                for i in range(count))


class ScopedIPUOutfeedQueue(IPUOutfeedQueue):
    """An IPUOutfeedQueue created in eager mode whose values go when it goes out of scope (on an
    IPU it deletes the device stream then; here the host queue is freed with the object)."""

    def __init__(self, outfeed_mode: Optional[IPUOutfeedMode] = None,
                 device_ordinal: Optional[int] = None) -> None:
        if not tf.executing_eagerly():
            raise RuntimeError("ScopedIPUOutfeedQueue can only be created in eager mode")
        super().__init__(outfeed_mode=outfeed_mode, device_ordinal=device_ordinal)
