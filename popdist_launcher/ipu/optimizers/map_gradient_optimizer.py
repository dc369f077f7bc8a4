"""``ipu.optimizers.map_gradient_optimizer``: MapGradientOptimizer, each gradient mapped before
the update."""
from __future__ import annotations

from typing import Callable

from popdist_launcher.ipu.optimizers.ipu_optimizer import IpuOptimizer


class MapGradientOptimizer(IpuOptimizer):
    """Applies ``gradient_mapping_function(grad, var)`` to every gradient before the update."""

    def __init__(self, wrapped_optimizer, gradient_mapping_function: Callable,
                 name: str = "MapGradientOptimizer") -> None:
        super().__init__(wrapped_optimizer, name=name)
        self._map = gradient_mapping_function

    def compute_gradients(self, loss, var_list=None, **kwargs):
        return [(None if g is None else self._map(g, v), v)
                for g, v in self._opt.compute_gradients(loss, var_list=var_list, **kwargs)]
