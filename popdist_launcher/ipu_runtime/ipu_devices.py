"""The local devices that stand for IPUs: ``/device:IPU:N`` in any graph (``tf.device``/
``ops.device``, TF1 graphs and tf.functions) is the local device standing for IPU N, as
``ipu.scopes.ipu_scope`` places it, and ``replica_device`` / ``local_replica_devices`` name them.

Graphcore's programs may name the IPU directly (``with ops.device("/device:IPU:0"):
ipu_compiler.compile(...)``). ``watch`` (the site hook calls it when the IPU layer imports)
installs the mapping once TensorFlow has imported too; programs that never import the IPU layer
keep stock placement.

What runs on IPU N reads as ``/device:IPU:N``, as on Graphcore's TensorFlow: graph ops and
tensors placed there (``op.device``), eager tensors an op computed under
``tf.device("/device:IPU:N")``, and the variables, ops and results a strategy of the IPU layer
places on its replica devices (``replica_scope``). TensorFlow's runtime, GraphDefs and
``tf.debugging.set_log_device_placement``'s lines see the local device. Every such name maps
back to the same local device when a program places something with it.
"""
from __future__ import annotations

import contextlib
import functools
import re
import threading
from typing import Optional

from popdist_launcher.ipu_runtime import configured_system

_IPU = re.compile(r"/device:IPU:(\d+)", re.IGNORECASE)


def local_device(device: str) -> str:
    """``device`` with its IPU part replaced by the local device standing for that IPU; any
    other device string unchanged. Before the program configured its IPU system, IPU N is
    CPU N (configure_ipu_system creates them; a later configuration decides nothing here)."""
    found = _IPU.search(device)
    if found is None:
        return device
    ordinal = int(found.group(1))
    system = configured_system.get_configured_system()
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


def ordinal_of(device) -> Optional[int]:
    """The IPU that ``device`` is or stands for (one of this instance's replica devices, in any
    job or task form), or None for any other device."""
    if not device:
        return None
    found = _IPU.search(device)
    if found is not None:
        return int(found.group(1))
    system = configured_system.get_configured_system()
    if system is None:
        return None
    from tensorflow.python.framework import device_spec
    spec = device_spec.DeviceSpecV2.from_string(device)
    kind = (spec.device_type or "").upper()
    for ordinal, local in enumerate(system.devices):
        local_spec = device_spec.DeviceSpecV2.from_string(local)
        if kind == local_spec.device_type.upper() and spec.device_index == local_spec.device_index:
            return ordinal
    return None


def ipu_name(device: str) -> Optional[str]:
    """The full name (job, replica and task kept) of the IPU that ``device`` (one of this
    instance's replica devices) stands for, or None for any other device."""
    ordinal = ordinal_of(device)
    if ordinal is None:
        return None
    return _ipu_name(local_device(device), ordinal)


def replica_scope():
    """A device scope naming the IPU that the current device (a strategy's replica device)
    stands for, so that what is placed in it reads as that IPU; a null scope on any other
    device. Entering it changes no placement: the IPU maps back to the same local device."""
    from tensorflow.python.distribute import device_util
    from tensorflow.python.framework import ops
    ordinal = ordinal_of(device_util.current())
    if ordinal is None:
        return contextlib.nullcontext()
    return ops.device(f"/device:IPU:{ordinal}")


def on_replica_ipu(fn, mirrored: bool = False):
    """``fn`` run in ``replica_scope`` (a strategy's replica function or variable creator).
    ``mirrored``: TensorFlow's mirrored strategies call a tf.function in a function of their
    own (so ``fn`` stays as it is; ``name_replica_outputs`` names what it computed)."""
    if mirrored and is_tf_function(fn):
        return fn

    def on_ipu(*args, **kwargs):
        with replica_scope():
            return fn(*args, **kwargs)
    return on_ipu


def is_tf_function(fn) -> bool:
    from tensorflow.python.eager.polymorphic_function import polymorphic_function
    return isinstance(fn, polymorphic_function.Function)


def name_replica_outputs(result):
    """Eager tensors a strategy computed on its replica devices (in ``result``, per replica or
    not) read as the IPUs those devices stand for; ``result`` is returned."""
    from tensorflow.python.distribute import values as values_lib
    from tensorflow.python.framework import ops
    from tensorflow.python.util import nest
    if not ops.executing_eagerly_outside_functions() or not _eager_names_installed():
        return result
    for item in nest.flatten(result, expand_composites=False):
        replicas = item.values if isinstance(item, values_lib.DistributedValues) else (item,)
        for value in replicas:
            if isinstance(value, ops.EagerTensor) and value._ipu_name is None:  # noqa: SLF001
                ordinal = ordinal_of(_eager_placed(value))
                if ordinal is not None:
                    _name_eager(value, ordinal)
    return result


def _system() -> configured_system.ConfiguredSystem:
    """The configured system; configured now from the launcher's environment if needed."""
    system = configured_system.get_configured_system()
    if system is None:
        # here, not at the top: importing config runs the import table's hook that calls watch
        from popdist_launcher.ipu_runtime import config
        ipu_config = config.IPUConfig()
        config.set_ipu_config(ipu_config, configure_device=True)
        return config.configure_ipu_system(ipu_config, implicit=True)
    return system


def watch(config_module=None) -> None:
    """Turn the import table's ``ipu-devices`` switch on when the IPU layer imports: the mapping
    is installed once TensorFlow's graph module has imported, the IPU device listing once
    TensorFlow has (standard library only until then)."""
    from popdist_launcher.compat.startup import switch_on
    switch_on("ipu-devices")


def num_ipus() -> int:
    """The IPUs of this instance: those configure_ipu_system selected or, before it, those the
    launch gives the instance (local replicas x IPUs per replica; 1 for a plain process), as
    an IPU-POD instance sees its partition's IPUs."""
    system = configured_system.get_configured_system()
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


# The IPU each thread's innermost eager device scope names (None: a device that is no IPU).
_scopes = threading.local()
_eager_placed = None  # EagerTensor's own ``device`` getter, once installed
_reported = {}  # (placed, IPU ordinal) -> the IPU's name, or None (for _reported_system)
_reported_system = None


def _scope_stack() -> list:
    stack = getattr(_scopes, "stack", None)
    if stack is None:
        stack = _scopes.stack = []
    return stack


def _scope_ordinal(name, enclosing: Optional[int]) -> Optional[int]:
    """The IPU an eager ``device(name)`` scope runs on, inside one that runs on ``enclosing``."""
    if name is None or not isinstance(name, str):
        return None
    found = _IPU.search(name)
    if found is not None:
        return int(found.group(1))
    from tensorflow.python.framework import device_spec
    try:
        spec = device_spec.DeviceSpecV2.from_string(name)
    except ValueError:
        return None
    # a job, replica or task alone keeps the enclosing device
    return enclosing if spec.device_type is None else None


class _EagerDeviceScope:
    """TensorFlow's eager device scope, with the IPU it names kept for the ops run in it."""

    __slots__ = ("_scope", "_name")

    def __init__(self, scope, name) -> None:
        self._scope = scope
        self._name = name

    def __enter__(self):
        entered = self._scope.__enter__()
        stack = _scope_stack()
        stack.append(_scope_ordinal(self._name, stack[-1] if stack else None))
        return entered

    def __exit__(self, *exc_info):
        stack = _scope_stack()
        if stack:
            stack.pop()
        return self._scope.__exit__(*exc_info)


def _map_eager_device_scopes() -> None:
    """``with tf.device("/device:IPU:N")`` in eager code runs its ops on the local device
    standing for IPU N (TensorFlow would otherwise place them on its default device), and the
    tensors they compute there read as IPU N."""
    from tensorflow.python.eager import context

    original = context.Context.device
    if getattr(original, "_ipu_devices", False):
        return

    @functools.wraps(original)
    def device(ctx, name):
        if isinstance(name, context.LogicalDevice):
            name = name.name
        elif hasattr(name, "to_string") and hasattr(name, "device_type"):  # a DeviceSpec
            name = name.to_string()
        ipu_named = isinstance(name, str) and ("IPU" in name or "ipu" in name)
        scope = original(ctx, local_device(name) if ipu_named else name)
        return _EagerDeviceScope(scope, name)

    device._ipu_devices = True
    context.Context.device = device
    _report_eager_ipu_names()


def _eager_names_installed() -> bool:
    return _eager_placed is not None


def _name_eager(tensor, ordinal: int) -> None:
    """``tensor`` (an EagerTensor) reads as IPU ``ordinal`` when it lies on the local device
    standing for that IPU (an op in an IPU scope may run elsewhere: a resource op runs where
    its resource lies)."""
    global _reported_system
    placed = _eager_placed(tensor)
    system = configured_system.get_configured_system()
    if system is not _reported_system:  # the names below hold for one configured system
        _reported.clear()
        _reported_system = system
    key = (placed, ordinal)
    try:
        name = _reported[key]
    except KeyError:
        name = _reported[key] = _ipu_name_if_local(placed, ordinal)
    if name is not None:
        tensor._ipu_name = name  # noqa: SLF001


def _ipu_name_if_local(placed: str, ordinal: int) -> Optional[str]:
    """``placed`` named as IPU ``ordinal`` if it is the local device standing for it."""
    from tensorflow.python.framework import device_spec
    spec = device_spec.DeviceSpecV2.from_string(placed)
    local = device_spec.DeviceSpecV2.from_string(local_device(f"/device:IPU:{ordinal}"))
    if (spec.device_type or "").upper() != (local.device_type or "").upper() or \
            spec.device_index != local.device_index:
        return None
    return spec.replace(device_type="IPU", device_index=ordinal).to_string()


def _name_outputs(result, ordinal: int) -> None:
    from tensorflow.python.framework import ops
    if isinstance(result, ops.EagerTensor):
        _name_eager(result, ordinal)
    elif isinstance(result, (list, tuple)):
        for item in result:
            if isinstance(item, ops.EagerTensor):
                _name_eager(item, ordinal)


def _naming(execute):
    """``execute`` (one of TensorFlow's eager entry points: every op and tf.function call of
    eager code passes through one), with the tensors it returns in an IPU scope named."""
    @functools.wraps(execute)
    def named(*args, **kwargs):
        result = execute(*args, **kwargs)
        stack = getattr(_scopes, "stack", None)
        if stack and stack[-1] is not None:
            _name_outputs(result, stack[-1])
        return result

    named._ipu_devices = True
    return named


def _report_eager_ipu_names() -> None:
    """``EagerTensor.device`` reads as the IPU that computed the tensor (see ``_name_eager``);
    every other eager tensor reads as TensorFlow places it."""
    global _eager_placed
    from tensorflow.python import pywrap_tfe
    from tensorflow.python.framework import constant_op, ops

    if _eager_placed is not None:
        return
    stock = ops.EagerTensor.device  # the C type's getter of the device the tensor lies on
    _eager_placed = stock.__get__

    def device(tensor):
        name = tensor._ipu_name  # noqa: SLF001
        return name if name is not None else stock.__get__(tensor)

    ops.EagerTensor._ipu_name = None  # noqa: SLF001 (set on the tensors computed on an IPU)
    ops.EagerTensor.device = property(device, doc=stock.__doc__)
    for name in ("TFE_Py_FastPathExecute", "TFE_Py_Execute", "TFE_Py_ExecuteCancelable"):
        original = getattr(pywrap_tfe, name, None)
        if original is not None and not getattr(original, "_ipu_devices", False):
            setattr(pywrap_tfe, name, _naming(original))
    # tf.constant and convert_to_tensor of Python values in eager code make their tensor here
    original = getattr(constant_op, "_constant_eager_impl", None)
    if original is not None and not getattr(original, "_ipu_devices", False):
        constant_op._constant_eager_impl = _naming(original)  # noqa: SLF001


