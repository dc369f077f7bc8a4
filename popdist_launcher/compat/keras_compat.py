"""TensorFlow 2.6 -> 2.15/2.21 bridges for IPU programs: the Keras modules that Graphcore's TF 2.6
programs import and that moved (``keras.optimizer_v2``, ``keras.engine``,
``tensorflow.python.keras.datasets`` ...), ``compile(steps_per_execution=<tensor>)``, which
Graphcore's Keras accepted, and TF 2.6's Keras optimizers (the ``OptimizerV2`` classes) under the
public optimizer names.

The import table (popdist_launcher.compat.import_table) calls ``install`` once TensorFlow or Keras
(or the IPU layer) has imported, which turns its ``keras-2`` entries on: the moved modules (an alias
only for a module this TensorFlow lacks, naming the module that holds the same classes now:
``keras.X`` -> ``K.src.X``, ``keras.optimizer_v2.X`` -> ``K.src.optimizers.legacy.X``,
``tensorflow.python.keras.X`` -> ``K.src.X``, where K is the package that is Keras 2 here:
``keras`` on TensorFlow 2.15, ``tf_keras`` on 2.16+, see popdist_launcher.compat.keras2) and the
hooks below. These only make work what fails in stock Keras, so every program gets them. The
optimizers are TensorFlow 2.6's in IPU programs only (the table's ``ipu-program`` switch, decided
when TensorFlow imports, before the program can bind a Keras name: see
popdist_launcher.compat.ipu_program), so the project's own strategies and programs that never name
Graphcore's modules keep Keras 2.15's optimizers.
Standard library only at import time (the site hook may load this module).
"""
import functools
import logging

from popdist_launcher.compat import keras2

log = logging.getLogger(__name__)


def steps_per_execution_value(value):
    """``steps_per_execution`` as Keras 2.15 takes it: a tensor, variable or NumPy integer with a
    known value becomes a Python int (Graphcore's Keras accepted them); anything else unchanged."""
    if value is None or isinstance(value, (int, str)):
        return value
    import numpy as np
    if isinstance(value, np.integer):
        return int(value)
    import tensorflow as tf
    if isinstance(value, (tf.Tensor, tf.Variable)):
        static = tf.get_static_value(value)
        if static is not None and np.ndim(static) == 0:
            return int(static)
    return value


def patch_compile(training_module) -> None:
    """Make ``Model.compile`` accept a tensor ``steps_per_execution`` (run on Keras's import)."""
    model_class = training_module.Model
    original = model_class.compile
    if getattr(original, "_ipu_steps_per_execution", False):
        return

    def compile(self, *args, **kwargs):  # noqa: A001 (Keras's name)
        if "steps_per_execution" in kwargs:
            kwargs["steps_per_execution"] = steps_per_execution_value(kwargs["steps_per_execution"])
        elif len(args) >= 7:
            # optimizer, loss, metrics, loss_weights, weighted_metrics, run_eagerly
            args = args[:6] + (steps_per_execution_value(args[6]),) + args[7:]
        return original(self, *args, **kwargs)

    compile._ipu_steps_per_execution = True
    compile.__wrapped__ = original
    compile.__doc__ = original.__doc__
    model_class.compile = compile


def install(_module=None) -> None:
    """Turn the import table's ``keras-2`` entries on (moved modules, ``Model.compile`` and
    ``keras.losses`` patched when they import). Nothing under Keras 3 (TF_USE_LEGACY_KERAS=0 on
    TensorFlow 2.16+): the IPU layer's Keras parts say so when they are used."""
    if keras2.keras_3_active():
        log.debug("tf.keras is Keras 3: no TensorFlow 2.6 Keras bridges")
        return
    from popdist_launcher.compat.startup import switch_on
    switch_on("keras-2")


def add_losses_utils(losses_module) -> None:
    """``keras.losses.losses_utils`` (Keras 2.6's losses module imported it; Graphcore's programs
    use ``keras.losses.losses_utils.ReductionV2``) and ``keras.losses.LossFunctionWrapper``
    (public in Keras 2.6; Graphcore's BERT subclasses it)."""
    if not hasattr(losses_module, "losses_utils"):
        losses_module.losses_utils = keras2.import_src("utils.losses_utils")
    if not hasattr(losses_module, "LossFunctionWrapper"):  # the base of the public losses
        wrapper = next((c for c in losses_module.MeanSquaredError.__mro__
                        if c.__name__ == "LossFunctionWrapper"), None)
        if wrapper is not None:
            losses_module.LossFunctionWrapper = wrapper


def add_expand_1d(data_adapter) -> None:
    """``data_adapter.expand_1d`` (Keras 2.6; Graphcore's custom ``train_step`` examples call it
    first): every rank-1 tensor of a nest gets a trailing axis of 1, anything else is unchanged."""
    if hasattr(data_adapter, "expand_1d"):
        return
    import tensorflow as tf

    def expand_1d(data):
        def column(value):
            if isinstance(value, tf.Tensor) and value.shape.rank == 1:
                return tf.expand_dims(value, axis=-1)
            return value
        return tf.nest.map_structure(column, data)

    data_adapter.expand_1d = expand_1d


def tf26_initializer_seeds(backend) -> None:
    """An initializer made without a seed draws from TensorFlow's random ops, as in Keras 2.6: so
    ``tf.random.set_seed`` makes a model's initial weights repeat (Graphcore's tests build the
    same model twice after it and compare), and each call gives new values. Keras 2.10+ gives
    such an initializer a seed from Python's ``random`` instead. IPU programs only."""
    generator = backend.RandomGenerator
    if getattr(generator.__init__, "tf26_seeds", False):
        return
    original = generator.__init__

    @functools.wraps(original)
    def __init__(self, seed=None, rng_type=None, **kwargs):
        if seed is None and rng_type == generator.RNG_STATELESS:  # only initializers ask for it
            rng_type = generator.RNG_LEGACY_STATEFUL
        original(self, seed, rng_type, **kwargs)

    __init__.tf26_seeds = True
    generator.__init__ = __init__


# TensorFlow 2.6's ``tf.keras.optimizers`` classes: Keras 2.11+ keeps them in ``optimizers.legacy``.
_TF26_OPTIMIZERS = {"Adadelta": "adadelta", "Adagrad": "adagrad", "Adam": "adam",
                    "Adamax": "adamax", "Ftrl": "ftrl", "Nadam": "nadam", "RMSprop": "rmsprop",
                    "SGD": "gradient_descent", "Optimizer": "optimizer_v2"}

def legacy_by_name(optimizers_module) -> None:
    """Make Keras 2's ``src.optimizers.deserialize`` (which ``get`` calls) pick the legacy class for
    a name or a config that does not say it comes from a Keras 2.11+ optimizer."""
    original = optimizers_module.deserialize
    if getattr(original, "_tf26", False):
        return

    @functools.wraps(original)
    def deserialize(config, custom_objects=None, use_legacy_format=False, **kwargs):
        kwargs["use_legacy_optimizer"] = True  # a non-empty config's own flag still decides
        return original(config, custom_objects, use_legacy_format, **kwargs)

    deserialize._tf26 = True
    optimizers_module.deserialize = deserialize


def tf26_optimizer_names(api_module) -> None:
    """Point a public optimizers module's TF 2.6 names at the ``OptimizerV2`` classes."""
    optimizers_module = keras2.import_src("optimizers")
    legacy_by_name(optimizers_module)
    for name, module in _TF26_OPTIMIZERS.items():
        legacy = keras2.import_src(f"optimizers.legacy.{module}")
        setattr(api_module, name, getattr(legacy, "OptimizerV2" if name == "Optimizer" else name))
    api_module.deserialize = optimizers_module.deserialize
    log.debug("%s: TensorFlow 2.6's OptimizerV2 classes", api_module.__name__)
