"""``keras.ipu.optimizers.ALSOptimizerAdam``: automatic loss scaling around Keras's Adam."""
from __future__ import annotations

from popdist_launcher.compat import keras2
from popdist_launcher.ipu.keras.optimizers.als_optimizer import ALSOptimizerAround

adam = keras2.import_src("optimizers.legacy.adam")


class ALSOptimizerAdam(ALSOptimizerAround):
    """``ALSOptimizer`` around a (legacy) Keras ``Adam`` made from the first arguments. The
    gradients are unscaled before Adam applies them, so its moments hold unscaled values
    and the update is Adam's on the unscaled gradients (Graphcore's folds the unscaling
    into Adam's coefficients to keep float16 moments in range; in float32 the two agree)."""

    INNER_OPTIMIZER = adam.Adam
    INNER_DEFAULTS = {"learning_rate": 0.001, "beta_1": 0.9, "beta_2": 0.999,
                      "epsilon": 1e-7}
