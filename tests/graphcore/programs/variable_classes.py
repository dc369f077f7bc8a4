"""The variables the strategies make are Graphcore's classes, with Graphcore's numbers
(graphcore/tensorflow r2.6/sdk-release-3.4 ipu/distributed/popdist_strategy_test.py): a
sync-on-read MEAN variable, a mirrored SUM variable and BatchNormalization's weights and moving
statistics under PopDistStrategy; the same classes under IPUMultiWorkerStrategyV1. Run with
``poprun-lite -np 2``; writes OUT/variables-<instance>.json.

usage: variable_classes.py OUT_DIR [popdist|multi-worker]
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import popdist  # noqa: E402
from tensorflow.python.distribute.reduce_util import ReduceOp  # noqa: E402
from tensorflow.python.eager import def_function  # noqa: E402
from tensorflow.python.framework import constant_op  # noqa: E402
from tensorflow.python.ipu.distributed.popdist_strategy import (  # noqa: E402
    IPUMirroredVariable, IPUSyncOnReadVariable, PopDistStrategy)
from tensorflow.python.ipu import ipu_multi_worker_strategy  # noqa: E402
from tensorflow.python.ops import variables  # noqa: E402
from tensorflow.python.ops.variable_scope import (  # noqa: E402
    VariableAggregation, VariableSynchronization)
from tensorflow.keras import layers  # noqa: E402

out_dir = sys.argv[1]
kind = sys.argv[2] if len(sys.argv) > 2 else "popdist"
index = popdist.getInstanceIndex()
strategy = PopDistStrategy() if kind == "popdist" else \
    ipu_multi_worker_strategy.IPUMultiWorkerStrategyV1()
out = {}

with strategy.scope():
    on_read = variables.Variable(float(index + 1), dtype=np.float32,
                                 synchronization=VariableSynchronization.ON_READ,
                                 aggregation=VariableAggregation.MEAN)
    on_write = variables.Variable(float(index + 1), dtype=np.float32,
                                  synchronization=VariableSynchronization.ON_WRITE,
                                  aggregation=VariableAggregation.SUM)
    out["classes"] = [type(on_read).__name__, type(on_write).__name__,
                      isinstance(on_read, IPUSyncOnReadVariable),
                      isinstance(on_write, IPUMirroredVariable),
                      isinstance(on_read, ipu_multi_worker_strategy.IPUSyncOnReadVariable)]
    out["on_read_initial"] = float(on_read.read_value())  # instance 0's value everywhere

    @def_function.function
    def add(x):
        on_read.assign(x + on_read)
        return on_read

    strategy.run(add, args=[constant_op.constant(index + 1.0)])
    out["on_read_after"] = float(on_read.read_value())  # mean(1 + 1, 1 + 2) = 2.5

    @def_function.function
    def square():
        return on_write * on_write

    per_replica = strategy.run(square, args=[])
    out["mirrored_sum"] = float(strategy.reduce(ReduceOp.SUM, per_replica, axis=None))

    batch_norm = layers.BatchNormalization(momentum=0.0)

    @def_function.function
    def normalise(x):
        return batch_norm(x, training=True)

    x = constant_op.constant([[2.0 * (index + 1)], [0.0]])
    strategy.run(normalise, args=(x,))
    out["batch_norm_classes"] = [isinstance(batch_norm.beta, IPUMirroredVariable),
                                 isinstance(batch_norm.gamma, IPUMirroredVariable),
                                 isinstance(batch_norm.moving_mean, IPUSyncOnReadVariable),
                                 isinstance(batch_norm.moving_variance, IPUSyncOnReadVariable)]
    out["moving_mean"] = np.asarray(batch_norm.moving_mean).tolist()
    out["moving_variance"] = np.asarray(batch_norm.moving_variance).tolist()

with open(os.path.join(out_dir, f"variables-{index}.json"), "w") as f:
    json.dump(out, f)
