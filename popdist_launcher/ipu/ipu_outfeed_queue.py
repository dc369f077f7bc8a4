"""``ipu.ipu_outfeed_queue``: IPUOutfeedQueue, values a loop hands back to the host.

``enqueue`` inside a loop body appends the values to a host-side FIFO queue (created on the
first enqueue, outside any loop or function); ``dequeue`` returns everything enqueued since the
last dequeue, stacked on a new first axis (``IPUOutfeedMode.ALL``), or only the last element
(``IPUOutfeedMode.LAST``). Enqueued from ``strategy.run`` of a strategy with several local
replicas (a replicated IPUStrategy, PopDistStrategy with --num-replicas), each replica has its
own queue and the result has a replica axis, as Graphcore's with a replication factor above 1:
``[enqueues, replicas, ...]`` (ALL) or ``[replicas, ...]`` (LAST).

Enqueued by the replicas of a replicated ``ipu_compiler.compile`` program (TF1 graphs), each
replica has its own queue too. When configure_ipu_system rebuilds that program for another
replica count (see ``ipu._replicated_compile``), the dequeues already taken are rewired to the
new queues; a dequeue taken before any IPU system was configured has an unknown static shape,
as the replica axis comes with the configuration.

Another thread may drain the queue while the program trains (dequeue returns what has arrived
so far, as on an IPU). Once every thread that enqueues into it (the threads that built its
enqueues, and the main thread) has ended, such a reader gets ``tf.errors.OutOfRangeError``
instead of an empty result, so a program whose main thread raised ends instead of waiting for
its reader forever.
"""
from __future__ import annotations

import enum
import itertools
import logging
import threading
from typing import Any, Optional

import tensorflow as tf

from popdist_launcher.ipu._loop_support import REPLICA, local_replica
from popdist_launcher.ipu_runtime import jit_functions

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
        if device_ordinal is not None and (not isinstance(device_ordinal, int)
                                           or device_ordinal < 0):
            raise ValueError(f"device_ordinal must be an int >= 0, got {device_ordinal!r}.")
        if buffer_depth <= 0:
            raise ValueError(f"Outfeed buffer depth cannot be less than 1, got {buffer_depth}.")
        jit_functions.install()
        self._device_ordinal = device_ordinal or 0
        self._feed_name = f"outfeed_{next(_ids)}"
        self._structure = None
        self._queues = None  # one per local replica
        self._replicated = False
        self._producers = set()  # the threads that built enqueues into this queue
        self._program = False  # enqueued by a compile() program in a TF1 graph
        self._provisional = False  # ... built before any IPU system was configured
        self._rewirable = []  # (TF1) the identity ops of each dequeue of such a queue

    @property
    def enqueued(self) -> bool:
        """Whether a loop body has enqueued into this queue."""
        return self._queues is not None

    def enqueue(self, tensors: Any):
        """Append ``tensors`` (a tensor, or a list, tuple or dict of them) to this replica's
        queue; returns the op."""
        jit_functions.host_operation("IPUOutfeedQueue.enqueue")
        replica, replicas = local_replica()
        flat = [tf.convert_to_tensor(t) for t in tf.nest.flatten(tensors)]
        self._producers.add(threading.current_thread())
        program_replica = REPLICA.get()
        if program_replica is not None:
            program_replica.program.watch(self)
            self._program = True
            self._provisional = program_replica.provisional
        if self._queues is None:
            self._structure = tensors
            self._replicated = replicas > 1
            with tf.init_scope(), tf.device("/device:CPU:0"):
                self._queues = [tf.queue.FIFOQueue(
                    _CAPACITY, [t.dtype for t in flat], shapes=[t.shape for t in flat],
                    name=f"{self._feed_name}_{r}") for r in range(replicas)]
        else:
            try:
                tf.nest.assert_same_structure(self._structure, tensors)
            except (ValueError, TypeError) as exc:
                raise ValueError(f"every enqueue into an IPUOutfeedQueue must have the structure "
                                 f"of the first ({exc}).") from None
            if replicas != len(self._queues):
                raise ValueError(f"this IPUOutfeedQueue was first enqueued from "
                                 f"{len(self._queues)} replica(s), now from {replicas}; use one "
                                 f"queue per strategy.")
        if replica < 0:
            return tf.no_op()
        with tf.device("/device:CPU:0"):
            return self._queues[replica].enqueue(flat)

    def dequeue(self, wait_for_completion: bool = False):
        """Everything enqueued since the last dequeue: each tensor stacked on a new first axis
        (ALL; empty arrays when nothing was enqueued), or the last element enqueued (LAST; again
        on the next dequeue until a newer one arrives; an error when nothing was enqueued).
        With several replicas, a replica axis follows the first (ALL) or comes first (LAST).
        Eager, from a thread that does not enqueue into it: an empty list before the first
        enqueue (as Graphcore's), OutOfRangeError when nothing is left and every thread that
        enqueues has ended."""
        if self._queues is None:
            if not tf.executing_eagerly() or self._is_producer():
                raise ValueError("Trying to dequeue an outfeed which has not been enqueued.")
            self._check_producers_alive_before_first_enqueue()
            if self._queues is None:
                return []
        flat = self._dequeue_flat()
        if self._program and not tf.executing_eagerly():
            flat = self._rewirable_outputs(flat)
        if (tf.executing_eagerly() and self._outfeed_mode == IPUOutfeedMode.ALL
                and flat and flat[0].shape[0] == 0):
            try:
                self._check_producers_alive()
            except tf.errors.OutOfRangeError:
                # The producers may have enqueued and ended after this dequeue read the queue's
                # size; nothing can arrive any more, so one more look sees all they left.
                flat = self._dequeue_flat()
                if flat[0].shape[0] == 0:
                    raise
        return tf.nest.pack_sequence_as(self._structure, list(flat))

    def _dequeue_flat(self) -> list:
        """Everything enqueued so far, flat, replicas combined (see dequeue)."""
        with tf.device("/device:CPU:0"):
            per_replica = [self._dequeue_one(queue) for queue in self._queues]
            if not self._replicated:
                return per_replica[0]
            axis = 0 if self._outfeed_mode == IPUOutfeedMode.LAST else 1
            return [tf.stack(parts, axis=axis) for parts in zip(*per_replica)]

    def _rewirable_outputs(self, flat: list) -> list:
        """``flat`` through identities that a rebuild can rewire (of unknown shape when the
        program enqueueing is provisional)."""
        if self._provisional:
            flat = [tf.compat.v1.placeholder_with_default(t, tf.TensorShape(None)) for t in flat]
        outputs = [tf.identity(t) for t in flat]
        self._rewirable.append([t.op for t in outputs])
        return outputs

    def _before_rebuild(self) -> None:
        """The program that enqueued into this queue is being built again (for another replica
        count): its copies enqueue anew (into one queue per replica)."""
        self._queues = None
        self._structure = None
        self._replicated = False
        self._provisional = False

    def _after_rebuild(self) -> None:
        """Rewire the dequeues taken before the rebuild to the new queues."""
        if self._queues is None:
            return
        for identities in self._rewirable:
            try:
                for identity, tensor in zip(identities, self._dequeue_flat()):
                    identity._update_input(0, tensor)  # noqa: SLF001
            except (ValueError, tf.errors.InvalidArgumentError):
                log.warning("An IPUOutfeedQueue dequeue taken before configure_ipu_system changed "
                            "the program's replicas keeps its shape and reads nothing; take the "
                            "dequeue after configure_ipu_system().")

    def _is_producer(self) -> bool:
        current = threading.current_thread()
        return current in self._producers or (not self._producers
                                              and current is threading.main_thread())

    def _check_producers_alive(self) -> None:
        """Raise OutOfRangeError in a reader thread when every thread that could still enqueue
        (those that built enqueues, and the main thread) has ended."""
        current = threading.current_thread()
        if current in self._producers:
            return
        others = (self._producers | {threading.main_thread()}) - {current}
        if others and not any(thread.is_alive() for thread in others):
            raise tf.errors.OutOfRangeError(
                None, None, f"IPUOutfeedQueue {self._feed_name} is empty and every thread that "
                f"could enqueue into it has ended ({', '.join(sorted(t.name for t in others))}): "
                f"nothing more will arrive, so this reader stops.")

    def _check_producers_alive_before_first_enqueue(self) -> None:
        """As _check_producers_alive, for a queue nothing had been enqueued into when the reader
        looked: no error when a producer enqueued (and ended) since."""
        try:
            self._check_producers_alive()
        except tf.errors.OutOfRangeError:
            if self._queues is None:
                raise

    def _dequeue_one(self, queue) -> list:
        flat = queue.dequeue_many(queue.size())
        flat = list(flat) if isinstance(flat, (list, tuple)) else [flat]
        if self._outfeed_mode == IPUOutfeedMode.LAST:
            last = [t[-1] for t in flat]
            with tf.control_dependencies([queue.enqueue(last)]):  # it stays the last
                flat = [tf.identity(t) for t in last]
        return flat

    @property
    def deleter(self):
        """Eager: forget this queue's values and structure now (a new enqueue starts a new
        queue). Graph mode: an op that drops the values enqueued so far."""
        if tf.executing_eagerly() or self._queues is None:
            self._delete()
            return None if tf.executing_eagerly() else tf.no_op(name=f"{self._feed_name}_deleter")
        with tf.device("/device:CPU:0"):
            drained = [queue.dequeue_many(queue.size()) for queue in self._queues]
        return tf.group(*tf.nest.flatten(drained), name=f"{self._feed_name}_deleter")

    def _delete(self) -> None:
        self._queues = None
        self._structure = None
        self._producers = set()

    def __iter__(self):
        """Eager, mode ALL: the dequeued elements one by one (each with its replica axis when
        several replicas enqueued)."""
        if not tf.executing_eagerly():
            raise RuntimeError("IPUOutfeedQueue can only be iterated over in eager mode.")
        if self._outfeed_mode != IPUOutfeedMode.ALL:
            raise RuntimeError("IPUOutfeedQueue can only be iterated over if the `outfeed_mode` "
                               "is set to 'IPUOutfeedMode.ALL'.")
        if self._queues is None:
            self._check_producers_alive_before_first_enqueue()
            if self._queues is None:
                return iter(())
        flat = tf.nest.flatten(self.dequeue())
        if not flat or flat[0].shape[0] == 0:
            return iter(())
        # One unstack per tensor (not one slice per element): a reader thread that drains the
        # queue while the program trains costs the training little.
        with tf.device("/device:CPU:0"):
            columns = [tf.unstack(t) for t in flat]
        return (tf.nest.pack_sequence_as(self._structure, list(element))
                for element in zip(*columns))


class ScopedIPUOutfeedQueue(IPUOutfeedQueue):
    """An IPUOutfeedQueue created in eager mode whose values go when it goes out of scope (on an
    IPU it deletes the device stream then; here the host queue is freed with the object)."""

    def __init__(self, outfeed_mode: Optional[IPUOutfeedMode] = None,
                 device_ordinal: Optional[int] = None) -> None:
        if not tf.executing_eagerly():
            raise RuntimeError("ScopedIPUOutfeedQueue can only be created in eager mode")
        super().__init__(outfeed_mode=outfeed_mode, device_ordinal=device_ordinal)
