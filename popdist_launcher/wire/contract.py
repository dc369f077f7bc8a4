"""The per-instance environment contract: variable names shared by the launcher and the runtime.

Pure data, no imports beyond the standard library: both sides of the contract read it from here.
"""
from __future__ import annotations

# PopDist variables, as Graphcore's poprun sets them.
NUM_TOTAL_REPLICAS = "POPDIST_NUM_TOTAL_REPLICAS"
NUM_LOCAL_REPLICAS = "POPDIST_NUM_LOCAL_REPLICAS"
REPLICA_INDEX_OFFSET = "POPDIST_REPLICA_INDEX_OFFSET"
NUM_IPUS_PER_REPLICA = "POPDIST_NUM_IPUS_PER_REPLICA"
LOCAL_INSTANCE_INDEX = "POPDIST_LOCAL_INSTANCE_INDEX"
UNIFORM_REPLICAS = "POPDIST_UNIFORM_REPLICAS_PER_INSTANCE"
NUM_INSTANCES = "POPDIST_NUM_INSTANCES"
INSTANCE_INDEX = "POPDIST_INSTANCE_INDEX"

# Ours: which attempt of the job this is (0 for the first start).
RESTART_COUNT = "POPRUN_RESTART_COUNT"
JOB_ID = "POPRUN_JOB_ID"  # one value per poprun-lite run, the same on every instance and attempt
# "1" (poprun-lite --tf1): TensorFlow starts with TensorFlow 1.15's behaviour (graph mode ...).
TF1 = "POPDIST_TF1"
# "1" (--tf-config auto, the default): TF_CONFIG holds poprun-lite's cluster, which tf.estimator's
# RunConfig applies only with a strategy that asks for a cluster
# (popdist_launcher.compat.run_config).
TF_CONFIG_AUTO = "POPRUN_TF_CONFIG_AUTO"
# The HOROVOD_* variables poprun-lite set for a plain hvd.init() (comma-separated names, none
# the user exported): an IPU program does not see them, as PopRun's instances had none
# (popdist_launcher.compat.poprun_environment).
HOROVOD_VARIABLES = "POPRUN_HOROVOD_VARIABLES"
# TensorFlow's own switch: "1" makes tf.keras Keras 2 (tf-keras) on TensorFlow 2.16+. Every
# instance gets the launcher's value, else none: each program's start-up hook decides
# (popdist_launcher.compat.keras2.choose).
LEGACY_KERAS = "TF_USE_LEGACY_KERAS"

POPDIST_INT_VARIABLES = (
    NUM_TOTAL_REPLICAS,
    NUM_LOCAL_REPLICAS,
    REPLICA_INDEX_OFFSET,
    NUM_IPUS_PER_REPLICA,
    LOCAL_INSTANCE_INDEX,
    NUM_INSTANCES,
    INSTANCE_INDEX,
)
