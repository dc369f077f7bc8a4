"""Graphcore's module paths reached as attributes after ``from tensorflow.python import ipu`` alone
(a package whose ``__init__`` imports from its modules binds them), used as a TF1 program uses
them: ``ipu.config.StochasticRoundingBehaviour.from_bool``, a linear model trained with
``ipu.optimizers.cross_replica_optimizer.CrossReplicaOptimizer`` in a plain Session, each
instance on its own data. Writes OUT/module-paths-<instance>.json (OUT: argv[1])."""
import json
import sys

import numpy as np
import popdist
import tensorflow.compat.v1 as tf
from tensorflow.python import ipu

tf.disable_v2_behavior()
MODULES = ("cross_replica_optimizer", "gradient_accumulation_optimizer", "ipu_optimizer",
           "map_gradient_optimizer", "sharded_optimizer")
out = {"modules": {name: hasattr(ipu.optimizers, name) for name in MODULES}}
optimizers = ipu.optimizers
out["same_classes"] = [
    optimizers.cross_replica_optimizer.CrossReplicaOptimizer is optimizers.CrossReplicaOptimizer,
    optimizers.map_gradient_optimizer.MapGradientOptimizer is optimizers.MapGradientOptimizer,
    optimizers.sharded_optimizer.ShardedOptimizer is optimizers.ShardedOptimizer,
    optimizers.ipu_optimizer.IpuOptimizer is optimizers.IpuOptimizer,
    (optimizers.gradient_accumulation_optimizer.GradientAccumulationOptimizerV2
     is optimizers.GradientAccumulationOptimizerV2)]

# IPUConfig's enum helper (the SDK's boolean stochastic-rounding option, as programs convert it)
from_bool = ipu.config.StochasticRoundingBehaviour.from_bool
config = ipu.config.IPUConfig()
config.floating_point_behaviour.esr = from_bool(popdist.getInstanceIndex() == 0)
config.configure_ipu_system()
out["esr"] = [from_bool(True).name, from_bool(0).name, config.floating_point_behaviour.esr.name]

index = popdist.getInstanceIndex()
x = np.arange(8, dtype=np.float32).reshape(4, 2) / 8 + index  # each instance its own data
y = np.array([[1.0], [2.0], [3.0], [4.0]], dtype=np.float32) * (index + 1)
w = tf.get_variable("w", initializer=np.array([[0.5], [-0.5]], dtype=np.float32))
loss = tf.reduce_mean(tf.square(tf.matmul(tf.constant(x), w) - tf.constant(y)))
opt = optimizers.cross_replica_optimizer.CrossReplicaOptimizer(
    tf.train.GradientDescentOptimizer(0.1))
train = opt.minimize(loss)
with tf.Session() as session:
    session.run(tf.global_variables_initializer())
    for _ in range(3):
        session.run(train)
    out["w"] = session.run(w).ravel().tolist()
with open(f"{sys.argv[1]}/module-paths-{index}.json", "w") as f:
    json.dump(out, f)
