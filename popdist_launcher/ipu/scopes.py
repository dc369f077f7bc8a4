"""``ipu.scopes``: ``ipu_scope('/device:IPU:0')`` places ops on the local compute device; the
other scopes of Graphcore's API (sharding, partials type, stochastic rounding, ...) steer the IPU
compiler and are accepted here with no effect (logged once each)."""
from __future__ import annotations

import contextlib
import logging
from typing import Iterator

import tensorflow as tf

from popdist_launcher.ipu._loop_support import REPLICA

log = logging.getLogger(__name__)
_logged: set = set()
# XLA's attribute names for the frontend attributes and outside-compilation markers of an op.
FRONTEND_ATTRIBUTES_NAME = "_XlaFrontendAttributes"
OUTSIDE_COMPILATION_NAME = "_xla_outside_compilation"


def _log_inert(scope: str, what: str) -> None:
    if scope not in _logged:
        _logged.add(scope)
        log.info("ipu.scopes.%s: %s; it has no effect on this machine.", scope, what)


@contextlib.contextmanager
def ipu_scope(device: str = "/device:IPU:0") -> Iterator[None]:
    """The IPU device N is this instance's replica device N (a CPU or GPU): ops run there and
    ``op.device`` names ``/device:IPU:N``, as on Graphcore's TensorFlow."""
    from popdist_launcher.ipu_runtime.ipu_devices import replica_device

    index = int(device.rsplit(":", 1)[-1]) if device.rsplit(":", 1)[-1].isdigit() else 0
    replica_device(index)  # raises for an IPU this instance does not have
    with tf.device(f"/device:IPU:{index}"):
        yield


@contextlib.contextmanager
def ipu_jit_scope(ipu_scope: int) -> Iterator[None]:  # noqa: A002 (Graphcore's argument name)
    """Groups ops into one IPU compilation cluster; here ops run as TensorFlow places them."""
    _log_inert("ipu_jit_scope", "it groups ops into one Poplar compilation cluster")
    yield


@contextlib.contextmanager
def outside_compilation_scope(name: str = "outside") -> Iterator[None]:
    """Ops in this scope run on the host CPU, as on an IPU system."""
    with tf.name_scope(name), tf.device("/device:CPU:0"):
        yield


@contextlib.contextmanager
def ipu_shard(index: int) -> Iterator[None]:
    """Places ops on shard ``index`` of a multi-IPU replica; here a replica is one device, so
    every shard runs on it, in program order (the same numbers)."""
    if isinstance(index, bool) or not isinstance(index, (int, list)):
        raise ValueError(f"ipu_shard needs a shard index (int), got {index!r}.")
    _log_inert("ipu_shard", "a replica is one device here, so all shards run on it")
    program_replica = REPLICA.get()
    if program_replica is not None:  # a compile() program: a replica spans its shards' IPUs
        program_replica.program.note_ipus(max(index if isinstance(index, list) else [index]) + 1)
    yield


@contextlib.contextmanager
def frontend_attribute(attribute_name: str, attribute_value: str,
                       restore_to=None) -> Iterator[None]:
    """Sets a Poplar frontend attribute on the ops in the scope."""
    _log_inert("frontend_attribute", "it sets Poplar frontend attributes")
    yield


@contextlib.contextmanager
def stochastic_rounding(override: bool) -> Iterator[None]:
    """Turns IPU stochastic rounding on or off for the ops in the scope."""
    _log_inert("stochastic_rounding", "CPUs and GPUs always round to nearest")
    yield


@contextlib.contextmanager
def partials_type(override_type) -> Iterator[None]:
    """Sets the IPU's accumulation type for matmuls and convolutions in the scope."""
    _log_inert("partials_type", "it sets the IPU's matmul/convolution partials type")
    yield
