"""``ipu.config`` (Graphcore's name): IPUConfig, its enums, configure_ipu_system and the
configured system's accessors. Implemented in popdist_launcher.ipu_runtime.config, below the
strategies, which configure replicas with it too."""
from popdist_launcher.ipu_runtime.config import (  # noqa: F401
    ConfiguredSystem, DeviceConnectionType, ExecutionProfileType, IPUConfig,
    MergeRemoteBuffersBehaviour, SchedulingAlgorithm, SelectionOrder, StochasticRoundingBehaviour,
    configure_ipu_system, get_ipu_config, reset_ipu_configuration, running_on_ipu_model,
    set_ipu_config, validate)
