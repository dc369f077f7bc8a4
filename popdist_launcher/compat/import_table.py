"""The import table: every module name the site hook answers (Graphcore's IPU names, TensorFlow
2.6's moved Keras modules, TensorFlow's removed modules) and every hook it runs around an
import, as data. ``popdist_launcher.compat.startup.ImportTableFinder`` is the one finder that
applies it; ``popdist_launcher.ipu``'s attributes and docs/ipu-api-coverage.md ("The import table")
follow it.

An entry applies while all of its switches are on (``when``). Switches:

- ``ipu-alias``: Graphcore's names import (on unless ``POPDIST_LAUNCHER_IPU_ALIAS=0``).
- ``tf-keras``: ``keras`` is Keras 2 from the tf-keras package (TensorFlow 2.16+ with
  ``TF_USE_LEGACY_KERAS`` set or chosen; ``popdist_launcher.compat.startup.choose_keras``).
- ``keras-2``: TensorFlow has imported and tf.keras is Keras 2 (``keras_compat.install``).
- ``ipu-program``: the program is written for Graphcore's SDK (it names one of the ``graphcore``
  entries below: ``popdist_launcher.compat.startup.decide_ipu_program``, at TensorFlow's import, or
  the first
  import of such a name): Keras optimizers are TensorFlow 2.6's, NumPy has its 1.x names.
- ``ipu-devices``: the IPU layer has imported, or TensorFlow in an IPU program
  (``ipu_runtime.ipu_devices.watch``): ops placed on ``/device:IPU:N`` and ``tf.config``'s IPU
  device
  listings.
- ``estimator-removed``: TensorFlow 2.16+ without tf.estimator's support modules
  (``estimator.install``).
- ``tf1``, ``tf-config-auto``, ``horovod-elastic``, ``instance`` (a program poprun-lite's
  wrapper started: the library's progress reports, ``FROZEN_AFTER_IMPORT``): from poprun-lite's
  variables (``ENVIRONMENT_SWITCHES``).

``{keras2}`` in a name is the package that is Keras 2 here: ``keras`` on TensorFlow 2.15,
``tf_keras`` on 2.16+ (popdist_launcher.compat.keras2); entries that use it wait for ``keras-2``.
Standard library only, and nothing imported: the site hook reads this at every interpreter start.
"""

from popdist_launcher.compat.keras_moves import MOVED as TF_PYTHON_KERAS_MOVED

KERAS_2 = "{keras2}"
# In a program poprun-lite started (switch ``instance``), the cyclic garbage collector is off
# while one of these imports and what the import made is then frozen (``gc.freeze``: never
# scanned again; it lives as long as the process). Its passes over TensorFlow's half a million
# import-time objects are a fifth of an instance's CPU before it trains.
FROZEN_AFTER_IMPORT = ("tensorflow", "tf_keras", "keras", "horovod.tensorflow",
                       "tensorflow_estimator")
IPU = "tensorflow.python.ipu"
IPU_TARGET = "popdist_launcher.ipu"


class Alias:
    """``name`` imports as the module ``target`` (the same module object under both names; with
    ``children``, ``name.X`` as ``target.X`` too). ``shadows``: answered even where a real module
    of that name exists (a package whose children must be the target's); else only where
    TensorFlow or Keras has no such module. ``graphcore``: importing it makes the program an IPU
    program. ``make`` ("module:function", called with the name) builds the module instead of a
    target; ``message`` is the one sentence of the ModuleNotFoundError for a name with neither."""

    __slots__ = ("name", "target", "children", "shadows", "graphcore", "when", "make", "message")

    def __init__(self, name, target=None, *, children=True, shadows=True, graphcore=False,
                 when=(), make=None, message=None):
        self.name, self.target, self.children, self.shadows = name, target, children, shadows
        self.graphcore, self.when, self.make, self.message = graphcore, when, make, message

    def matches(self, fullname: str) -> bool:
        return fullname == self.name or (self.children and fullname.startswith(self.name + "."))

    def target_of(self, fullname: str):
        """The module ``fullname`` is under this entry (None for ``make`` and ``message``)."""
        return None if self.target is None else self.target + fullname[len(self.name):]

    def __repr__(self) -> str:
        return f"Alias({self.name!r} -> {self.target or self.make or 'gone'!r})"


class Hook:
    """``function`` ("module:function") runs with the module once ``module`` has imported (once
    its code has run; at once where it already has when the switches turn on), or, with
    ``before``, with the name each time the module is looked up, before it imports."""

    __slots__ = ("module", "function", "when", "before")

    def __init__(self, module, function, *, when=(), before=False):
        self.module, self.function, self.when, self.before = module, function, when, before

    def __repr__(self) -> str:
        return f"Hook({self.module!r} -> {self.function!r})"


# Graphcore's ipu package exports its ops and optimizer modules at the top too
# (``ipu.nn_ops`` is ``ipu.ops.nn_ops``): ``import tensorflow.python.ipu.nn_ops`` and
# ``from tensorflow.python import ipu; ipu.nn_ops`` both give ours.
IPU_OPS = ("all_to_all_op", "control_flow_ops", "cross_replica_ops", "embedding_ops",
           "functional_ops", "image_ops", "math_ops", "nn_ops", "normalization_ops",
           "pipelining_ops", "rand_ops", "reduce_scatter_op", "replication_ops", "slicing_ops",
           "statistics_ops", "within_replica_ops")
IPU_OPTIMIZERS = ("cross_replica_optimizer", "gradient_accumulation_optimizer", "ipu_optimizer",
                  "map_gradient_optimizer", "sharded_optimizer")
IPU_KERAS_EXTENSIONS = ("data_adapter", "extensions_base", "options", "pipeline_stages",
                        "replicas", "train_function")
# Functions Graphcore's ipu package exports at the top: name -> "module:function".
IPU_FUNCTIONS = {"outlined_function": "popdist_launcher.ipu.ops.functional_ops:outlined_function"}

_GRAPHCORE = dict(graphcore=True, when=("ipu-alias",))

ALIASES = (
    # Graphcore's names of the IPU layer.
    Alias(IPU, IPU_TARGET, **_GRAPHCORE),
    *(Alias(f"{IPU}.{name}", f"{IPU_TARGET}.ops.{name}", children=False, **_GRAPHCORE)
      for name in IPU_OPS),
    *(Alias(f"{IPU}.{name}", f"{IPU_TARGET}.optimizers.{name}", children=False, **_GRAPHCORE)
      for name in IPU_OPTIMIZERS),
    # The same flat names under the package's own spelling (``popdist_launcher.ipu.nn_ops``).
    *(Alias(f"{IPU_TARGET}.{name}", f"{IPU_TARGET}.ops.{name}", children=False)
      for name in IPU_OPS),
    *(Alias(f"{IPU_TARGET}.{name}", f"{IPU_TARGET}.optimizers.{name}", children=False)
      for name in IPU_OPTIMIZERS),
    # The Keras extensions' modules under ``ipu.keras.extensions`` (Graphcore's path for
    # ``extensions_base`` and ``data_adapter``) are the IPU runtime's.
    *(Alias(f"{IPU_TARGET}.keras.extensions.{name}", f"popdist_launcher.ipu_runtime.keras.{name}",
            children=False)
      for name in IPU_KERAS_EXTENSIONS),
    # Graphcore's Keras module: ``from tensorflow.keras import ipu``, ``keras.ipu.PipelineStage``;
    # ``tf_keras.ipu`` for ``from keras import ipu`` where ``keras`` is tf-keras by another name.
    *(Alias(name, "popdist_launcher.ipu.keras", **_GRAPHCORE)
      for name in ("keras.ipu", "tensorflow.keras.ipu", "keras.api._v2.keras.ipu", "tf_keras.ipu",
                   "tf_keras.api._v2.keras.ipu")),
    # The SDK's internal modules
    # (``from tensorflow.compiler.plugin.poplar.ops import gen_ipu_ops``).
    Alias("tensorflow.compiler.plugin", "popdist_launcher.ipu._sdk", **_GRAPHCORE),

    # ``import keras`` is Keras 2 (tf-keras) where tf.keras is (popdist_launcher.compat.keras2).
    Alias("keras", "tf_keras", when=("tf-keras",)),

    # TensorFlow 2.6's Keras modules that today's Keras 2 has elsewhere (only where missing).
    Alias("keras.optimizer_v2.learning_rate_schedule",
          f"{KERAS_2}.src.optimizers.schedules.learning_rate_schedule", shadows=False,
          when=("keras-2",)),
    Alias("keras.optimizer_v2", f"{KERAS_2}.src.optimizers.legacy", shadows=False,
          when=("keras-2",)),
    # In IPU programs tensorflow.python.keras is tf.keras's Keras 2 even where TensorFlow still
    # has its own old copy (popdist_launcher.compat.tf_python_keras), TF 2.6's moved modules
    # included.
    *(Alias(f"tensorflow.python.keras.{old}", f"{KERAS_2}.src.{new}",
            when=("keras-2", "ipu-program"))
      for old, new in TF_PYTHON_KERAS_MOVED.items()),
    Alias("tensorflow.python.keras", f"{KERAS_2}.src", when=("keras-2", "ipu-program")),
    Alias("tensorflow.python.keras", f"{KERAS_2}.src", shadows=False, when=("keras-2",)),
    Alias("keras", f"{KERAS_2}.src", shadows=False, when=("keras-2",)),
    # TensorFlow's own tensorflow.python.layers.normalization (TF1's batch normalization layers)
    # loads tf_keras.legacy_tf_layers, which tf-keras keeps under src/; on TensorFlow 2.15,
    # where Keras 2 is the keras package and tf-keras is not installed, in an IPU program both
    # names are Keras 2's (Graphcore's TF1 programs import that module).
    Alias("tf_keras.legacy_tf_layers", f"{KERAS_2}.src.legacy_tf_layers", shadows=False,
          when=("keras-2", "ipu-program")),
    Alias("tf_keras", KERAS_2, children=False, shadows=False, when=("keras-2", "ipu-program")),
    Alias("tf_keras.legacy_tf_layers", "tf_keras.src.legacy_tf_layers", shadows=False),

    # TensorFlow 1.15 / 2.6 modules TensorFlow 2.15 removed (docs/tf-removed-apis.md).
    Alias("tensorflow.python.distribute.distribution_strategy_context",
          "tensorflow.python.distribute.distribute_lib", children=False, shadows=False),
    Alias("tensorflow.pywrap_tensorflow", "tensorflow.python.training.py_checkpoint_reader",
          children=False, shadows=False),
    # The parts of contrib Graphcore's TF1 applications use (popdist_launcher.compat.tf_contrib).
    *(Alias(name, f"{IPU_TARGET}.ipu_compiler", children=False, shadows=False)
      for name in ("tensorflow.contrib.compiler.xla",  # contrib's xla.compile is ipu_compiler's
                   "popdist_launcher.compat.tf_contrib.compiler.xla")),
    Alias("tensorflow.contrib", "popdist_launcher.compat.tf_contrib", shadows=False, message=(
        "tensorflow.contrib, beyond its layers initializers, compiler.xla, data.AUTOTUNE, "
        "framework checkpoint functions and rnn cells, was removed in TensorFlow 2 and is not "
        "provided here: use its TensorFlow 2 replacement (tf.compat.v1.layers, tf.keras, "
        "tf.train).")),
    Alias("tensorflow.tools.graph_transforms", shadows=False, message=(
        "tensorflow.tools.graph_transforms (TransformGraph) was removed in TensorFlow 2 and is "
        "not provided here: export the model without the graph transforms (they only optimise "
        "an inference graph) or use tf.compat.v1.graph_util to freeze it.")),

    # tf.estimator on TensorFlow 2.16+ (popdist_launcher.compat.estimator): the estimator API
    # as TensorFlow 2.15 had it, and the modules TensorFlow removed that it imports.
    *(Alias(name, f"tensorflow_estimator.python.estimator.api._{v}.estimator", shadows=False,
            when=("estimator-removed",))
      for name, v in (("tensorflow.estimator", "v2"), ("tensorflow.compat.v2.estimator", "v2"),
                      ("tensorflow.compat.v1.estimator", "v1"))),
    # The estimator's modules at TensorFlow 2.15's internal path (``from tensorflow.python.
    # estimator import estimator_lib, model_fn, run_config``), as tensorflow-estimator's.
    Alias("tensorflow.python.estimator", "tensorflow_estimator.python.estimator", shadows=False,
          when=("estimator-removed",)),
    Alias("tensorflow.python.distribute.estimator_training",
          "popdist_launcher.compat.estimator.estimator_training", children=False, shadows=False,
          when=("estimator-removed",)),
    # Modules only TPUEstimator uses, inside its functions: import, and say so when used.
    *(Alias(f"tensorflow.python.tpu.{name}", children=False, shadows=False,
            make="popdist_launcher.compat.estimator:tpu_only_module", when=("estimator-removed",))
      for name in ("session_support", "tpu_embedding", "tpu_embedding_gradient")),
)

# The modules whose import means "the IPU layer has imported": IPUConfig's (which ipu/ imports
# first) and the IPU devices' (which the strategies import).
IPU_LAYER = ("popdist_launcher.ipu_runtime.config", "popdist_launcher.ipu_runtime.ipu_devices")
_TF26_OPTIMIZERS = "popdist_launcher.compat.keras_compat:tf26_optimizer_names"

HOOKS = (
    # Keras 2 on TensorFlow 2.16+: decide TF_USE_LEGACY_KERAS before TensorFlow reads it.
    Hook("tensorflow", "popdist_launcher.compat.startup:choose_keras", before=True),
    Hook("keras", "popdist_launcher.compat.startup:choose_keras", before=True),
    Hook("horovod.tensorflow.keras", "popdist_launcher.compat.keras2:refuse_keras_3"),
    Hook("horovod.keras", "popdist_launcher.compat.keras2:refuse_keras_3"),
    # TensorFlow 2.6's Keras for every program (they only make work what fails in stock Keras):
    # switches on keras-2, whichever of these imports first.
    Hook("tensorflow", "popdist_launcher.compat.keras_compat:install"),
    Hook("keras", "popdist_launcher.compat.keras_compat:install"),
    *(Hook(ipu, "popdist_launcher.compat.keras_compat:install") for ipu in IPU_LAYER),
    Hook(f"{KERAS_2}.src.engine.training", "popdist_launcher.compat.keras_compat:patch_compile",
         when=("keras-2",)),
    Hook(f"{KERAS_2}.losses", "popdist_launcher.compat.keras_compat:add_losses_utils",
         when=("keras-2",)),
    Hook(f"{KERAS_2}.src.engine.data_adapter", "popdist_launcher.compat.keras_compat:add_expand_1d",
         when=("keras-2",)),
    Hook(f"{KERAS_2}.src.backend", "popdist_launcher.compat.keras_compat:tf26_initializer_seeds",
         when=("keras-2", "ipu-program")),
    # Whether the program is an IPU program, decided before it can bind a Keras name.
    Hook("tensorflow", "popdist_launcher.compat.startup:decide_ipu_program", when=("ipu-alias",)),
    Hook("numpy", "popdist_launcher.compat.startup:decide_ipu_program", when=("ipu-alias",)),
    # PopRun's environment for IPU programs: no launcher-set HOROVOD_* in os.environ.
    *(Hook(module, "popdist_launcher.compat.poprun_environment:hide_launcher_horovod_variables",
           when=("ipu-program",)) for module in ("numpy", "tensorflow")),
    # NumPy 1.x's names (np.float_, np.NaN, np.product ...) for IPU programs.
    Hook("numpy", "popdist_launcher.compat.numpy1_names:install", when=("ipu-program",)),
    # TensorFlow 2.6's optimizers under the public names, for IPU programs.
    Hook(f"{KERAS_2}.src.optimizers", "popdist_launcher.compat.keras_compat:legacy_by_name",
         when=("keras-2", "ipu-program")),
    Hook("tensorflow.keras.optimizers", _TF26_OPTIMIZERS, when=("keras-2", "ipu-program")),
    *(Hook(f"{KERAS_2}.{module}", _TF26_OPTIMIZERS, when=("keras-2", "ipu-program"))
      for module in ("optimizers", "api._v2.keras.optimizers", "api._v1.keras.optimizers")),
    Hook("tensorflow", "popdist_launcher.compat.tf_python_keras:forget_tensorflows_copy",
         when=("keras-2", "ipu-program")),
    # TensorFlow's removed names that are attributes, not modules.
    Hook("tensorflow", "popdist_launcher.compat.tf_data_compat:install"),
    Hook("tensorflow", "popdist_launcher.compat.tf_removed:install"),
    Hook("tensorflow", "popdist_launcher.compat.estimator:install"),  # estimator-removed
    # IPU devices (``tf.config.list_logical_devices("IPU")``, ``/device:IPU:N``).
    *(Hook(ipu, "popdist_launcher.ipu_runtime.ipu_devices:watch") for ipu in IPU_LAYER),
    Hook("tensorflow", "popdist_launcher.ipu_runtime.ipu_devices:watch", when=("ipu-program",)),
    # One device per local replica before the program can run an operation (PopDist launches).
    Hook("tensorflow", "popdist_launcher.ipu_runtime.configured_system:prepare_local_replicas",
         when=("ipu-program",)),
    Hook("tensorflow.python.framework.ops", "popdist_launcher.ipu_runtime.ipu_devices:install",
         when=("ipu-devices",)),
    Hook("tensorflow", "popdist_launcher.ipu_runtime.ipu_devices:install_listing",
         when=("ipu-devices",)),
    # Keras' ``ipu`` module (keras.ipu.PipelineStage ...) as the IPU Keras methods install.
    Hook("popdist_launcher.ipu_runtime.keras.extensions_base",
         "popdist_launcher.ipu.keras_extensions:give_keras_its_ipu_module"),
    # poprun-lite's switches.
    Hook("tensorflow", "popdist_launcher.compat.tf1:disable_v2_behavior", when=("tf1",)),
    Hook("tensorflow", "popdist_launcher.compat.tf_contrib:install", when=("tf1",)),
    Hook("tensorflow_estimator.python.estimator.run_config",
         "popdist_launcher.compat.run_config:install",
         when=("tf-config-auto",)),  # RunConfig sees the cluster only with a strategy
    Hook("horovod.tensorflow.elastic", "popdist_launcher.compat.horovod_elastic:install",
         when=("horovod-elastic",)),
    Hook("horovod.tensorflow.elastic", "popdist_launcher.compat.horovod_keras_sync:install",
         when=("horovod-elastic",)),
    Hook("tensorflow.python.checkpoint.checkpoint_management",
         "popdist_launcher.compat.progress_hooks:install_checkpoint_manager",
         when=("instance",)),
    *(Hook(callbacks, "popdist_launcher.compat.progress_hooks:install_keras_callbacks",
           when=("instance",)) for callbacks in ("tf_keras.src.callbacks",
                                                         "keras.src.callbacks")),
)

# Switches the environment turns on at interpreter start: switch -> {variable: value} (all must
# hold; None: set to anything). Names of popdist_launcher.wire.contract, spelled out to import
# nothing.
ENVIRONMENT_SWITCHES = {
    "tf1": {"POPDIST_TF1": "1"},  # poprun-lite --tf1: TensorFlow 1.15's behaviour
    "tf-config-auto": {"POPRUN_TF_CONFIG_AUTO": "1"},  # --tf-config auto
    "horovod-elastic": {"HOROVOD_ELASTIC": "1", "POPRUN_JOB_ID": None},  # Horovod elastic mode
    "instance": {"POPRUN_STACK_FD": None},  # started by poprun-lite's wrapper
}
# ... and the switch on unless its variable says "0".
IPU_ALIAS_ENV = "POPDIST_LAUNCHER_IPU_ALIAS"


def switches_from(environ) -> set:
    """The switches ``environ`` turns on at interpreter start."""
    on = {name for name, wanted in ENVIRONMENT_SWITCHES.items()
          if all(var in environ if value is None else environ.get(var) == value
                 for var, value in wanted.items())}
    if environ.get(IPU_ALIAS_ENV, "1") != "0":
        on.add("ipu-alias")
    return on


def _by_name() -> dict:
    found: dict = {}
    for alias in ALIASES:
        found.setdefault(alias.name, []).append(alias)
    for entries in found.values():
        entries.sort(key=lambda a: not a.shadows)
    return found


_BY_NAME = _by_name()  # name -> its entries, a shadowing one first
_FIRST_PARTS = {name.partition(".")[0] for name in _BY_NAME}


def aliases_for(fullname: str, on) -> list:
    """The entries that answer ``fullname`` with the switches ``on``, most specific first (a
    shadowing entry before one of the same name that does not)."""
    if fullname.partition(".")[0] not in _FIRST_PARTS:
        return []  # most names: one set lookup
    found = []
    name = fullname
    while name:
        for alias in _BY_NAME.get(name, ()):
            if (alias.children or name == fullname) and all(s in on for s in alias.when):
                found.append(alias)
        name = name.rpartition(".")[0]
    return found


def graphcore_name(fullname: str) -> bool:
    """Whether ``fullname`` is one of Graphcore's names (or a module below one)."""
    return any(a.graphcore and a.matches(fullname) for a in ALIASES)


def ipu_attribute(name: str):
    """What ``tensorflow.python.ipu.<name>`` is as an attribute: ("module", our module names to
    try in order) or ("function", "module:function"), the same as the finder imports."""
    if name in IPU_FUNCTIONS:
        return "function", IPU_FUNCTIONS[name]
    fullname = f"{IPU}.{name}"
    return "module", [a.target_of(fullname) for a in aliases_for(fullname, {"ipu-alias"})]
