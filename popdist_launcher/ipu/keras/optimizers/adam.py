"""``keras.ipu.optimizers.ALSOptimizerAdam``: automatic loss scaling around Keras's Adam."""
from __future__ import annotations

from popdist_launcher.compat import keras2
from popdist_launcher.ipu.keras.optimizers.als_optimizer import ALSDefaults, ALSOptimizerAround

adam = keras2.import_src("optimizers.legacy.adam")


class ALSOptimizerAdam(ALSOptimizerAround):
    """``ALSOptimizer`` around a (legacy) Keras ``Adam`` made from the first arguments. The
    gradients are unscaled before Adam applies them, so its moments hold unscaled values
    and the update is Adam's on the unscaled gradients (Graphcore's folds the unscaling
    into Adam's coefficients to keep float16 moments in range; in float32 the two agree)."""

    INNER_ARGUMENTS = ("learning_rate", "beta_1", "beta_2", "epsilon")

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7,
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
                 name: str = "ALSOptimizerAdam") -> None:
        super().__init__(adam.Adam(learning_rate=learning_rate, beta_1=beta_1, beta_2=beta_2,
                                   epsilon=epsilon),
                         initial_loss_scaling_factor, update_frequency, increase_factor,
                         max_loss_scaling_factor, accumulate_statistics_over_update_period,
                         ratio_threshold, captured_grads_only, lpf_alpha, histogram_bin_edge,
                         name)
