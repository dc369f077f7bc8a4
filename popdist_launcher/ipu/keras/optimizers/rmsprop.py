"""``keras.ipu.optimizers.ALSOptimizerRMSProp``: automatic loss scaling around Keras's RMSprop."""
from __future__ import annotations

from popdist_launcher.compat import keras2
from popdist_launcher.ipu.keras.optimizers.als_optimizer import ALSDefaults, ALSOptimizerAround

rmsprop = keras2.import_src("optimizers.legacy.rmsprop")


class ALSOptimizerRMSProp(ALSOptimizerAround):
    """``ALSOptimizer`` around a (legacy) Keras ``RMSprop`` made from the first arguments. The
    gradients are unscaled before RMSprop applies them, so its moments hold unscaled values
    and the update is RMSprop's on the unscaled gradients (Graphcore's folds the unscaling
    into RMSprop's coefficients to keep float16 moments in range; in float32 the two agree)."""

    INNER_ARGUMENTS = ("learning_rate", "rho", "momentum", "epsilon", "centered")

    def __init__(self, learning_rate=0.001, rho=0.9, momentum=0.0, epsilon=1e-7, centered=False,
                 initial_loss_scaling_factor=ALSDefaults.initial_loss_scaling_factor,
                 update_frequency=ALSDefaults.update_frequency,
                 increase_factor=ALSDefaults.increase_factor,
                 max_loss_scaling_factor=ALSDefaults.max_loss_scaling_factor,
                 accumulate_statistics_over_update_period=ALSDefaults.
                 accumulate_statistics_over_update_period,
                 ratio_threshold=ALSDefaults.ratio_threshold,
                 captured_grads_only=ALSDefaults.captured_grads_only,
                 lpf_alpha=ALSDefaults.lpf_alpha,
                 histogram_bin_edge=ALSDefaults.histogram_bin_edge,
                 name: str = "ALSOptimizerRMSProp") -> None:
        super().__init__(rmsprop.RMSprop(learning_rate=learning_rate, rho=rho, momentum=momentum,
                                         epsilon=epsilon, centered=centered),
                         initial_loss_scaling_factor, update_frequency, increase_factor,
                         max_loss_scaling_factor, accumulate_statistics_over_update_period,
                         ratio_threshold, captured_grads_only, lpf_alpha, histogram_bin_edge,
                         name)
