"""``ipu.optimizers.ipu_optimizer``: IpuOptimizer, the base of the IPU optimizer wrappers."""
from __future__ import annotations

from typing import Optional

import tensorflow as tf


class IpuOptimizer(tf.compat.v1.train.Optimizer):
    """Base of the wrappers: delegates everything to the wrapped optimizer."""

    def __init__(self, opt, name: Optional[str] = None) -> None:
        super().__init__(use_locking=False, name=name or type(self).__name__)
        self._opt = opt

    def compute_gradients(self, loss, var_list=None, **kwargs):
        return self._opt.compute_gradients(loss, var_list=var_list, **kwargs)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        return self._opt.apply_gradients(grads_and_vars, global_step=global_step, name=name)

    def get_slot(self, *args, **kwargs):
        return self._opt.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._opt.get_slot_names(*args, **kwargs)

    def variables(self):
        return self._opt.variables()
