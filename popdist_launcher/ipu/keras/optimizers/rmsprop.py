"""``keras.ipu.optimizers.ALSOptimizerRMSProp``: automatic loss scaling around Keras's RMSprop."""
from __future__ import annotations

from popdist_launcher.compat import keras2
from popdist_launcher.ipu.keras.optimizers.als_optimizer import ALSOptimizerAround

rmsprop = keras2.import_src("optimizers.legacy.rmsprop")


class ALSOptimizerRMSProp(ALSOptimizerAround):
    """``ALSOptimizer`` around a (legacy) Keras ``RMSprop`` made from the first arguments. The
    gradients are unscaled before RMSprop applies them, so its moments hold unscaled values
    and the update is RMSprop's on the unscaled gradients (Graphcore's folds the unscaling
    into RMSprop's coefficients to keep float16 moments in range; in float32 the two agree)."""

    INNER_OPTIMIZER = rmsprop.RMSprop
    INNER_DEFAULTS = {"learning_rate": 0.001, "rho": 0.9, "momentum": 0.0, "epsilon": 1e-7,
                      "centered": False}
