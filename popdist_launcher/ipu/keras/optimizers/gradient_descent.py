"""``keras.ipu.optimizers.ALSOptimizerSGD``: automatic loss scaling around Keras's SGD."""
from __future__ import annotations

from popdist_launcher.compat import keras2
from popdist_launcher.ipu.keras.optimizers.als_optimizer import ALSOptimizerAround

gradient_descent = keras2.import_src("optimizers.legacy.gradient_descent")


class ALSOptimizerSGD(ALSOptimizerAround):
    """``ALSOptimizer`` around a (legacy) Keras ``SGD`` made from the first arguments. The
    gradients are unscaled before SGD applies them, so its moments hold unscaled values
    and the update is SGD's on the unscaled gradients (Graphcore's folds the unscaling
    into SGD's coefficients to keep float16 moments in range; in float32 the two agree)."""

    INNER_OPTIMIZER = gradient_descent.SGD
    INNER_DEFAULTS = {"learning_rate": 0.01, "momentum": 0.0}
