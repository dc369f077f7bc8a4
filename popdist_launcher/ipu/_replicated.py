"""The extended part of an IPUStrategy with several local replicas: PopDistStrategy's
local-replica machinery for one instance (imported only when an IPUStrategy replicates)."""
from __future__ import annotations

from typing import Sequence

from popdist_launcher.ipu_runtime.tf_internal import mirrored_strategy
from popdist_launcher.strategies.horovod_cross_device_ops import HorovodAllReduce
from popdist_launcher.strategies.popdist_strategy import HorovodExtended, unsharded_input_warning


class ReplicatedIPUExtended(HorovodExtended):
    """PopDistStrategy's local-replica machinery for one instance, without Horovod: mirrored
    variables on every local replica device, reductions summed on the host, and datasets
    distributed element by element (replica r of step s reads element s * R + r), as
    PopDistStrategy's local replicas read them."""

    def __init__(self, container_strategy, devices: Sequence[str]) -> None:
        # HorovodExtended's own __init__ joins the instances with Horovod; the replicas of an
        # IPUStrategy are this instance's only, so set up its state for one instance here.
        self._instance_index = 0
        self._num_instances = 1
        self._num_local = len(devices)
        self._variables_on_host = False
        self._unsharded_input = unsharded_input_warning(type(container_strategy).__name__)
        self._host_device = "/device:CPU:0"
        ops = HorovodAllReduce(1, self._num_local, self._host_device)
        mirrored_strategy.MirroredExtended.__init__(self, container_strategy, devices=list(devices),
                                                    cross_device_ops=ops)
        self._cross_device_ops = ops
        self._input_grouped = False
