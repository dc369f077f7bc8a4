"""The local devices that stand for IPUs: ``/device:IPU:N`` in any graph (``tf.device``/
``ops.device``, TF1 graphs and tf.functions) is the local device standing for IPU N, as
``ipu.scopes.ipu_scope`` places it, and ``replica_device`` / ``local_replica_devices`` name them.

Graphcore's programs may name the IPU directly (``with ops.device("/device:IPU:0"):
ipu_compiler.compile(...)``). ``watch`` (the site hook calls it when the IPU layer imports)
installs the mapping once TensorFlow has imported too; programs that never import the IPU layer
keep stock placement.
"""
from __future__ import annotations

import functools
import re

from popdist_launcher.ipu import _configured_system, config

_IPU = re.compile(r"/device:IPU:(\d+)", re.IGNORECASE)


def local_device(device: str) -> str:
    """``device`` with its IPU part replaced by the local device standing for that IPU; any
    other device string unchanged. Before the program configured its IPU system, IPU N is
    CPU N (configure_ipu_system creates them; a later configuration decides nothing here)."""
    found = _IPU.search(device)
    if found is None:
        return device
    ordinal = int(found.group(1))
    system = _configured_system.get_configured_system()
    if system is not None and ordinal < len(system.devices):
        local = system.devices[ordinal]
    else:
        local = f"/device:CPU:{ordinal}"
    return device[:found.start()] + local + device[found.end():]


def local_replica_devices() -> tuple:
    """This instance's replica devices: as configure_ipu_system set them up, or, when it was not
    called, configured now from the launcher's environment (one device per local replica)."""
    system = _system()
    if system.missing_devices:
        raise RuntimeError(system.missing_devices)
    return system.devices


def replica_device(ordinal: int) -> str:
    """The TensorFlow device standing for ``/device:IPU:<ordinal>``."""
    system = _system()
    if ordinal < len(system.devices):
        return system.devices[ordinal]
    if system.missing_devices:
        raise RuntimeError(system.missing_devices)
    raise ValueError(f"/device:IPU:{ordinal} does not exist: this instance has "
                     f"{len(system.devices)} IPU device(s), /device:IPU:0 .. "
                     f"/device:IPU:{len(system.devices) - 1}; select more with "
                     f"IPUConfig.auto_select_ipus.")


def _system() -> _configured_system.ConfiguredSystem:
    """The configured system; configured now from the launcher's environment if needed."""
    system = _configured_system.get_configured_system()
    if system is None:
        ipu_config = config.IPUConfig()
        config.set_ipu_config(ipu_config, configure_device=True)
        return config.configure_ipu_system(ipu_config)
    return system


def watch(config_module=None) -> None:
    """Turn the import table's ``ipu-devices`` switch on when the IPU layer imports: the mapping
    is installed once TensorFlow's graph module has imported, the IPU device listing once
    TensorFlow has (standard library only until then)."""
    from popdist_launcher._startup import switch_on
    switch_on("ipu-devices")


def num_ipus() -> int:
    """The IPUs of this instance: those configure_ipu_system selected or, before it, those the
    launch gives the instance (local replicas x IPUs per replica; 1 for a plain process), as
    an IPU-POD instance sees its partition's IPUs."""
    system = _configured_system.get_configured_system()
    if system is not None:
        return system.num_ipus
    from popdist_launcher import runtime
    return runtime.num_local_replicas() * runtime.num_ipus_per_replica()


def _is_ipu_type(device_type) -> bool:
    return isinstance(device_type, str) and device_type.upper() == "IPU"


def ipu_physical_devices() -> list:
    """``tf.config.list_physical_devices("IPU")``: ``/physical_device:IPU:N``, type ``IPU``."""
    from tensorflow.python.eager import context
    return [context.PhysicalDevice(name=f"/physical_device:IPU:{i}", device_type="IPU")
            for i in range(num_ipus())]


def ipu_logical_devices() -> list:
    """``tf.config.list_logical_devices("IPU")``: ``/job:localhost/replica:0/task:0/device:IPU:N``
    (listing them initialises no TensorFlow device, so configure_ipu_system may still follow)."""
    from tensorflow.python.eager import context
    return [context.LogicalDevice(name=f"/job:localhost/replica:0/task:0/device:IPU:{i}",
                                  device_type="IPU") for i in range(num_ipus())]


def _listing(original, ipu_devices):
    @functools.wraps(original)
    def listing(device_type=None):
        if _is_ipu_type(device_type):
            return ipu_devices()
        return original(device_type)
    listing._ipu_devices = True
    return listing


def _device_details(original):
    @functools.wraps(original)
    def get_device_details(device):
        if _is_ipu_type(getattr(device, "device_type", None)):
            return {"device_name": "IPU"}
        return original(device)
    get_device_details._ipu_devices = True
    return get_device_details


def install_listing(tf_module=None) -> None:
    """``tf.config.list_physical_devices("IPU")``, ``list_logical_devices("IPU")`` (also as
    ``tf.config.experimental.*`` and ``get_visible_devices``) list this instance's IPUs;
    ``get_device_details`` of one says ``IPU``. Every other device type is TensorFlow's."""
    import tensorflow as tf
    from tensorflow.python.framework import config as framework_config

    modules = [framework_config, tf.config, tf.config.experimental, tf.compat.v1.config,
               tf.compat.v1.config.experimental]
    wrappers = {"list_physical_devices": ipu_physical_devices,
                "list_logical_devices": ipu_logical_devices,
                "get_visible_devices": ipu_physical_devices}
    for module in modules:
        for name, ipu_devices in wrappers.items():
            original = getattr(module, name, None)
            if original is not None and not getattr(original, "_ipu_devices", False):
                setattr(module, name, _listing(original, ipu_devices))
        original = getattr(module, "get_device_details", None)
        if original is not None and not getattr(original, "_ipu_devices", False):
            setattr(module, "get_device_details", _device_details(original))


def install(ops_module=None) -> None:
    """Map IPU devices in every op TensorFlow places from now on (once per process)."""
    from tensorflow.python.framework import ops

    original = ops.Operation._set_device_from_string  # noqa: SLF001 (where every device is set)
    if getattr(original, "_ipu_devices", False):
        return
    placed_device = ops.Operation.device.fget

    @functools.wraps(original)
    def set_device_from_string(op, device_str):
        """Every device TensorFlow sets on an op passes here (device functions, colocation,
        gradients, control flow): an IPU is replaced by its local device, and ``op.device``
        then names the IPU while the op runs on that device."""
        found = _IPU.search(device_str) if device_str else None
        if found is None:
            original(op, device_str)
            if getattr(op, "_ipu_device", None) is not None:
                op._ipu_device = None  # noqa: SLF001
            return
        original(op, local_device(device_str))
        placed = placed_device(op)
        op._ipu_device = (placed, _ipu_name(placed, int(found.group(1))))  # noqa: SLF001

    set_device_from_string._ipu_devices = True
    ops.Operation._set_device_from_string = set_device_from_string  # noqa: SLF001
    _report_ipu_names(ops.Operation, placed_device, getattr(ops, "SymbolicTensor", None))
    _map_eager_device_scopes()


def _ipu_name(placed: str, ordinal: int) -> str:
    """``placed`` (the local device TensorFlow holds) with its device part naming IPU ``ordinal``
    (job, replica and task kept)."""
    from tensorflow.python.framework import device_spec
    spec = device_spec.DeviceSpecV2.from_string(placed)
    return spec.replace(device_type="IPU", device_index=ordinal).to_string()


def _report_ipu_names(operation_class, placed_device, tensor_class) -> None:
    """``op.device`` (and ``tensor.device`` of its outputs) of an op placed on an IPU read as
    that IPU, as on Graphcore's TensorFlow; TensorFlow's runtime and every GraphDef see the
    local device. An IPU name read back into TensorFlow (colocation, ``tf.device(op.device)``)
    is mapped again when it is set on an op, so ops colocated with an IPU op share its device."""
    def device(op):
        placed = placed_device(op)
        reported = getattr(op, "_ipu_device", None)
        if reported is not None and reported[0] == placed:
            return reported[1]
        return placed

    device.__doc__ = operation_class.device.__doc__
    operation_class.device = property(device)
    if tensor_class is None:
        return  # no SymbolicTensor: a graph tensor's device is its op's
    stock = tensor_class.device  # the C++ tensor's own reading of the placed device

    def tensor_device(tensor):
        if getattr(tensor.op, "_ipu_device", None) is not None:
            return tensor.op.device
        return stock.__get__(tensor, tensor_class)

    tensor_class.device = property(tensor_device, doc=stock.__doc__)


def _map_eager_device_scopes() -> None:
    """``with tf.device("/device:IPU:N")`` in eager code runs its ops on the local device
    standing for IPU N (TensorFlow would otherwise place them on its default device)."""
    from tensorflow.python.eager import context

    original = context.Context.device
    if getattr(original, "_ipu_devices", False):
        return

    @functools.wraps(original)
    def device(ctx, name):
        if isinstance(name, str) and ("IPU" in name or "ipu" in name):
            name = local_device(name)
        return original(ctx, name)

    device._ipu_devices = True
    context.Context.device = device


