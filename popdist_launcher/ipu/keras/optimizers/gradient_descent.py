"""``keras.ipu.optimizers.ALSOptimizerSGD``: automatic loss scaling around Keras's SGD."""
from __future__ import annotations

from popdist_launcher.compat import keras2
from popdist_launcher.ipu.keras.optimizers.als_optimizer import ALSDefaults, ALSOptimizerAround

gradient_descent = keras2.import_src("optimizers.legacy.gradient_descent")


class ALSOptimizerSGD(ALSOptimizerAround):
    """``ALSOptimizer`` around a (legacy) Keras ``SGD`` made from the first arguments. The
    gradients are unscaled before SGD applies them, so its moments hold unscaled values
    and the update is SGD's on the unscaled gradients (Graphcore's folds the unscaling
    into SGD's coefficients to keep float16 moments in range; in float32 the two agree)."""

    INNER_ARGUMENTS = ("learning_rate", "momentum")

    def __init__(self, learning_rate=0.01, momentum=0.0,
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
                 name: str = "ALSOptimizerSGD") -> None:
        super().__init__(gradient_descent.SGD(learning_rate=learning_rate, momentum=momentum),
                         initial_loss_scaling_factor, update_frequency, increase_factor,
                         max_loss_scaling_factor, accumulate_statistics_over_update_period,
                         ratio_threshold, captured_grads_only, lpf_alpha, histogram_bin_edge,
                         name)
