"""Functions compiled with XLA (``tf.function(jit_compile=True)``) under the IPU layer run as
ordinary ``tf.function``s: on an IPU the whole function becomes one device program that holds
its infeeds, outfeeds and collectives; on a CPU those stay host ops, which XLA cannot compile.

Installed when a program creates an IPU-layer strategy, infeed or outfeed (a program that never
does keeps TensorFlow's own behaviour). A jit-compiled function then runs without XLA when it is
called under an IPU-layer strategy (``strategy.run(fn)``, or inside ``strategy.scope()``), or
when tracing it with XLA reaches an IPU-layer host operation (an IPU strategy's ``run``, an
IPUInfeedQueue dequeue, an IPUOutfeedQueue enqueue): that trace is abandoned and the function is
traced again without XLA. Every other jit-compiled function compiles with XLA as before. XLA
adds nothing to keep here: a training step compiled by XLA for a CPU ran slower than without it
(a small CNN 3.5x, a small dense model 1.3x), and the numbers are those of the program written
without ``jit_compile``.
"""
from __future__ import annotations

import contextvars
import functools
import logging

from popdist_launcher.ipu_runtime.tf_internal import (control_flow_util, distribute_lib,
                                                      polymorphic_function)

log = logging.getLogger(__name__)

# The attribute of a jit-compiled tf.function that holds its twin without XLA, once it has one.
_HOST_TWIN = "_ipu_host_function"
# True while a jit-compiled function traces under the wrapper below, which retries it without
# XLA when a host operation of the IPU layer is traced in it.
_RETRYING: contextvars.ContextVar = contextvars.ContextVar("ipu_jit_retry", default=False)


class HostOperationInXla(Exception):
    """An IPU-layer host operation was traced inside a jit-compiled function (internal: the
    function is then traced again without XLA)."""


def is_ipu_layer_strategy(strategy) -> bool:
    """Whether ``strategy`` is one of the IPU layer's (IPUStrategy, PopDistStrategy ...)."""
    return getattr(strategy, "_ipu_layer", False)


def host_operation(what: str) -> None:
    """Called by the IPU layer's host operations while they build ops: raises
    HostOperationInXla when they are being traced with XLA for a jit-compiled function that
    can still run without it (the caller's trace is then redone without XLA)."""
    if not _RETRYING.get():
        return
    from tensorflow.python.framework import ops
    if control_flow_util.GraphOrParentsInXlaContext(ops.get_default_graph()):
        raise HostOperationInXla(what)


def _under_ipu_strategy() -> bool:
    return (distribute_lib.has_strategy()
            and is_ipu_layer_strategy(distribute_lib.get_strategy()))


def _host_twin(function):
    """The same tf.function without XLA (made once, kept on the function)."""
    twin = function.__dict__.get(_HOST_TWIN)
    if twin is None:
        twin = function._clone(python_function=None)  # noqa: SLF001 (tf.function's arguments)
        twin._jit_compile = None  # noqa: SLF001 (an ordinary tf.function)
        function.__dict__[_HOST_TWIN] = twin
        log.debug("tf.function %s runs without XLA under the IPU layer.",
                  function._name)  # noqa: SLF001
    return twin


def _wrap_call(call):
    @functools.wraps(call)
    def __call__(self, *args, **kwds):
        if not self._jit_compile:  # noqa: SLF001
            return call(self, *args, **kwds)
        if _HOST_TWIN in self.__dict__ or _under_ipu_strategy():
            return _host_twin(self)(*args, **kwds)
        token = _RETRYING.set(True)
        try:
            return call(self, *args, **kwds)
        except HostOperationInXla as exc:
            log.debug("tf.function %s reached %s: traced again without XLA.",
                      self._name, exc)  # noqa: SLF001
        finally:
            _RETRYING.reset(token)
        return _host_twin(self)(*args, **kwds)

    __call__._ipu_layer = True
    return __call__


def install() -> None:
    """Make jit-compiled tf.functions run without XLA under the IPU layer (once)."""
    function_class = polymorphic_function.Function
    if not getattr(function_class.__call__, "_ipu_layer", False):
        function_class.__call__ = _wrap_call(function_class.__call__)
