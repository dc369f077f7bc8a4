"""Device names in a TF1 graph under IPUMultiWorkerStrategy, as Graphcore's
ipu_multi_worker_strategy_test reads them: the variables (on the IPU, or on the host with
``variables_on_host``), the ops of the replica function and its result on the worker's
``/device:IPU:0``, the reduced sum on its CPU; the sum is computed over the workers through a
session. Writes OUT/device-names-mw-<instance>.json.

usage: ipu_device_names_multi_worker.py OUT_DIR
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402
from tensorflow.python import ipu  # noqa: E402

import popdist  # noqa: E402

tf.compat.v1.disable_eager_execution()
out_dir = sys.argv[1]
config = ipu.config.IPUConfig()
config.configure_ipu_system()
out = {"instance": popdist.getInstanceIndex(), "instances": popdist.getNumInstances()}

for on_host in (False, True):
    with tf.Graph().as_default():
        strategy = ipu.ipu_multi_worker_strategy.IPUMultiWorkerStrategyV1(
            variables_on_host=on_host)
        got = {}
        with strategy.scope():
            v = tf.Variable(1.0)
            got["variable"] = v.device

            def replica_fn():
                w = tf.compat.v1.get_variable("w", initializer=float(popdist.getInstanceIndex() + 2))
                got["replica_variable"] = w.device
                op = tf.abs(w)
                got["op"] = op.device
                return op

            per_replica = strategy.run(replica_fn)
            got["result"] = per_replica.device
            total = strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
            got["sum_device"] = total.device
            session_config = strategy.update_config_proto(tf.compat.v1.ConfigProto())
            with tf.compat.v1.Session(target=strategy.session_target(),
                                      config=session_config) as session:
                session.run(tf.compat.v1.global_variables_initializer())
                got["sum"] = float(session.run(total))
        out["host" if on_host else "ipu"] = got

with open(os.path.join(out_dir, f"device-names-mw-{out['instance']}.json"), "w") as f:
    json.dump(out, f)
