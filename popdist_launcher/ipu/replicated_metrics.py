"""``ReplicatedMetricReductionMethod``: how Graphcore's Keras reports the metrics of several
replicas (``model.set_replication_options``); ``ipu.keras`` re-exports it. The enum lives in
popdist_launcher.ipu_runtime.reduction_methods, where the Keras extensions' options parse it."""
from popdist_launcher.ipu_runtime.reduction_methods import ReplicatedMetricReductionMethod  # noqa: F401
