"""``tensorflow.compiler.plugin.poplar.driver``: the driver's protocol-buffer modules
(``config_pb2``, ``trace_pb2``, ``threestate_pb2`` ...). Their enum values are Graphcore's; their
messages describe a Poplar engine, so making or parsing one raises one sentence."""
from __future__ import annotations

from typing import Callable

from popdist_launcher.ipu._sdk import add_modules, graphcore_name, unavailable

MODULES = ("backend_config_pb2", "config_pb2", "option_flag_pb2", "pipeline_config_pb2",
           "poplar_executable_pb2", "poplar_feed_config_pb2", "threestate_pb2", "trace_pb2")


def _message(qualified: str) -> type:
    """A stand-in for the message class ``qualified`` that raises when made or parsed."""
    def refuse(*args, **kwargs):
        raise unavailable(qualified, "the IPUConfig and the ipu.* API describe what this "
                          "program runs here")

    return type(qualified.rsplit(".", 1)[1], (), {
        "__init__": refuse, "FromString": staticmethod(refuse),
        "__module__": qualified.rsplit(".", 1)[0],
        "__doc__": f"Graphcore's {qualified} message (not available on a CPU)."})


class IpuTraceEvent:
    """The trace event types of ``trace_pb2.IpuTraceEvent`` (no events happen on a CPU:
    ``gen_ipu_ops.ipu_event_trace`` returns none)."""
    COMPILE_BEGIN = 0
    COMPILE_END = 1
    HOST_TO_DEVICE_TRANSFER = 2
    DEVICE_TO_HOST_TRANSFER = 3
    LOAD_ENGINE = 4
    EXECUTE = 5
    FromString = staticmethod(_message(graphcore_name(f"{__name__}.trace_pb2.IpuTraceEvent"))
                            .FromString)


def _messages(module: str) -> Callable[[str], object]:
    def __getattr__(name: str):
        if not name[:1].isupper():
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        return _message(f"{module}.{name}")
    return __getattr__


add_modules(__name__, MODULES, _messages, {
    "threestate_pb2": {"THREESTATE_OFF": 0, "THREESTATE_ON": 1, "THREESTATE_UNDEFINED": 2},
    "trace_pb2": {"IpuTraceEvent": IpuTraceEvent},
})
