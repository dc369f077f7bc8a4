"""Barriers, among every instance or among a group of them, and the registration of such a
group (a Horovod process set) on every instance."""
from __future__ import annotations

import os
from typing import Iterable, List, Optional, Tuple

import horovod.tensorflow as hvd
import tensorflow as tf

from popdist_launcher.collectives import _state
from popdist_launcher.collectives._describe import Sum, describe, op_name
from popdist_launcher.collectives._gather import allgather, run_now
from popdist_launcher.collectives._tracking import tracked


def register_group(members: Iterable[int]) -> Tuple[int, ...]:
    """Make the instances ``members`` (2 or more, not all) a group that ``barrier`` can wait on
    alone; returns the group's key. Every instance must call it with the same members, in the
    same order among its collectives (it is a collective of all instances); a group is
    registered once and kept until shutdown()."""
    st = _state.require()
    key = tuple(sorted(set(int(m) for m in members)))
    with _state.lock:
        if key in st.groups:
            return key
        if os.environ.get("HOROVOD_DYNAMIC_PROCESS_SETS") != "1":
            raise RuntimeError(
                f"a barrier among instances {list(key)} needs Horovod started with dynamic "
                f"process sets, but the program started Horovod itself (hvd.init()) before "
                f"popdist_launcher did; call popdist.init() before hvd.init(), or set "
                f"HOROVOD_DYNAMIC_PROCESS_SETS=1.")
        # All instances meet first in a collective under the stall watchdog (Horovod's own
        # registration waits without bound), and agree on the members.
        seen = run_now(lambda: allgather(
            tf.constant(key, tf.int32), name=f"register instance group {list(key)}"))
        if [int(v) for v in seen] != list(key) * st.size:
            raise ValueError(
                f"instance {st.rank} registered the instance group {list(key)} while another "
                f"instance registered a different group at the same point; call "
                f"execute_on_instances with the same instances on every instance.")
        st.groups[key] = hvd.add_process_set(list(key))
    return key


def barrier(name: str = "barrier", members: Optional[Iterable[int]] = None) -> None:
    """Return once every instance has called ``barrier`` (a Sum allreduce of one integer, under
    the stall watchdog: an instance that never arrives fails the others with the stall error
    naming ``name``). Runs eagerly, also in a program in TensorFlow 1's graph mode.

    ``members``: wait for these instances only (a group made by ``register_group`` on every
    instance first; the others do not take part); None waits for every instance."""
    st = _state.require()
    process_set = hvd.global_process_set
    expected = st.size
    if members is not None:
        key = tuple(sorted(set(int(m) for m in members)))
        if st.rank not in key:
            raise ValueError(f"{name}: instance {st.rank} is not one of the instances "
                             f"{list(key)} this barrier waits for.")
        if len(key) < st.size:
            process_set, expected = _state.group(key), len(key)

    def one(gated: List[tf.Tensor]) -> tf.Tensor:
        return hvd.allreduce(gated[0], op=Sum, name=op_name(name), process_set=process_set)

    def count() -> tf.Tensor:
        value = tf.constant(1, tf.int32)
        return tracked(describe("allreduce", name, value), [value], one)

    arrived = int(run_now(count))
    if arrived != expected:
        raise RuntimeError(f"{name}: {arrived} of {expected} instances arrived at the barrier.")
