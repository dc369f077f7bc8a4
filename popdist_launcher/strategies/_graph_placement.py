"""Where IPUMultiWorkerStrategy puts a TF1 graph's variable initialisers, host variables' reads
and a replica function's one-replica arguments, as Graphcore's strategy does (its test reads
these names): eager code and tf.functions are left as TensorFlow builds them."""
from __future__ import annotations

from typing import Callable

from popdist_launcher.ipu_runtime import ipu_devices

# The colocation group of every initial value Graphcore's strategy makes: a group name, not an
# op, that keeps all of them on one worker's host.
HOST_INITIALIZER_GROUP = b"loc:@cpu"


def in_tf1_graph() -> bool:
    """Building a TF1 graph (not eager code, not a tf.function)."""
    from tensorflow.python.framework import func_graph, ops
    return (not ops.executing_eagerly_outside_functions()
            and not isinstance(ops.get_default_graph(), func_graph.FuncGraph))


def on_host_group(initial_value_fn: Callable) -> Callable:
    """``initial_value_fn`` with the ops it makes in a TF1 graph colocated in the host group
    (``op.colocation_groups() == [b"loc:@cpu"]``); elsewhere unchanged."""
    if not callable(initial_value_fn):
        return initial_value_fn

    def in_host_group():
        if not in_tf1_graph():
            return initial_value_fn()
        from tensorflow.core.framework import attr_value_pb2
        from tensorflow.python.framework import ops
        group = attr_value_pb2.AttrValue(
            list=attr_value_pb2.AttrValue.ListValue(s=[HOST_INITIALIZER_GROUP]))
        with ops.get_default_graph()._attr_scope({"_class": group}):  # noqa: SLF001
            return initial_value_fn()

    return in_host_group


def cache_on_replica_ipu(variable_kwargs: dict) -> None:
    """A host variable made now in a TF1 graph, on a replica device, gets that replica's IPU as
    its caching device (unless the program gave one): its reads come from a snapshot there."""
    if variable_kwargs.get("caching_device") is not None or not in_tf1_graph():
        return
    from tensorflow.python.distribute import device_util
    ipu = ipu_devices.ipu_name(device_util.current())
    if ipu is not None:
        variable_kwargs["caching_device"] = ipu


def answer_values_of_one_replica(structure) -> None:
    """The values of one-replica ``PerReplica`` leaves of ``structure`` (a replica function's
    arguments) answer ``.values`` as the PerReplica did, in a TF1 graph. Graphcore's strategy
    hands its replica function the PerReplica itself (a distributed dataset's element, read as
    ``x.values[0]``); ours hands it the value, as TensorFlow's strategies do, so both readings
    work."""
    if not in_tf1_graph():
        return
    from tensorflow.python.distribute import values as values_lib
    from tensorflow.python.framework import tensor as tensor_lib
    from tensorflow.python.util import nest
    for leaf in nest.flatten(structure, expand_composites=False):
        if isinstance(leaf, values_lib.PerReplica) and len(leaf.values) == 1:
            value = leaf.values[0]
            if isinstance(value, tensor_lib.Tensor) and "values" not in vars(value):
                value.values = (value,)


def in_ipu_container(next_creator: Callable) -> Callable:
    """``next_creator`` (a variable creator called on a replica device) making its variable, in a
    TF1 graph, in that IPU's own resource container (``ipu<N>``) unless the program chose one.
    On an IPU system the IPU is a device of its own; here it is the host's CPU, and a host
    variable and an IPU variable of the same name (made by two graphs on one server) would
    otherwise be one resource."""
    def create(**kwargs):
        if not in_tf1_graph():
            return next_creator(**kwargs)
        from tensorflow.python.distribute import device_util
        from tensorflow.python.framework import ops
        graph = ops.get_default_graph()
        ordinal = ipu_devices.ordinal_of(device_util.current())
        if ordinal is None or graph._container:  # noqa: SLF001
            return next_creator(**kwargs)
        with graph.container(f"ipu{ordinal}"):
            return next_creator(**kwargs)

    return create


def through_host(value, host: str):
    """``value`` to be reduced, in a TF1 graph: a tensor (or a one-replica PerReplica's tensor)
    copied to ``host`` first, as Graphcore's strategy reduces. TensorFlow batches a reduction
    only where every value lies on its destination's device, so the gradients of variables on
    the IPU are then reduced one by one (one CollectiveReduce each), as on an IPU system."""
    if not in_tf1_graph():
        return value
    from tensorflow.python.distribute import values as values_lib
    from tensorflow.python.framework import ops, tensor as tensor_lib
    from tensorflow.python.ops import array_ops
    if isinstance(value, values_lib.PerReplica) and len(value.values) == 1:
        value = value.values[0]
    if not isinstance(value, tensor_lib.Tensor):
        return value
    with ops.device(host):
        return array_ops.identity(value)
