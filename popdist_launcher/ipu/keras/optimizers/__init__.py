"""``keras.ipu.optimizers``: Graphcore's Keras optimizer wrappers with their CPU meaning:
gradient accumulation (``GradientAccumulationOptimizer``) and automatic loss scaling
(``ALSOptimizer``, ``ALSGradientAccumulationOptimizer`` and its SGD / Adam / RMSProp forms)."""
from popdist_launcher.ipu.keras.optimizers.adam import ALSOptimizerAdam  # noqa: F401
from popdist_launcher.ipu.keras.optimizers.als_optimizer import (  # noqa: F401
    ALSGradientAccumulationOptimizer, ALSOptimizer)
from popdist_launcher.ipu.keras.optimizers.gradient_accumulation_optimizer import \
    GradientAccumulationOptimizer  # noqa: F401
from popdist_launcher.ipu.keras.optimizers.gradient_descent import ALSOptimizerSGD  # noqa: F401
from popdist_launcher.ipu.keras.optimizers.rmsprop import ALSOptimizerRMSProp  # noqa: F401
