"""The IPU runtime: what the strategies and Graphcore's ``ipu`` names both stand on, below the
strategies (``popdist_launcher.runtime`` is the launch environment, a layer lower). TensorFlow's
internals in one place (``tf_internal``), IPUConfig and the system it configures (``config``,
``configured_system``), the IPU devices (``ipu_devices``), jit-compiled IPU loops without XLA
(``jit_functions``), the dataset sharding check (``datasets``), the reduction-method enums and
the Keras extensions (``keras_extensions`` installs the methods of ``keras/``).
``popdist_launcher.ipu`` re-exports what of it is Graphcore's public API."""
from popdist_launcher.compat.needs import require

require("tensorflow", "popdist_launcher's IPU runtime")
