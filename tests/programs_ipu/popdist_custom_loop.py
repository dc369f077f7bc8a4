"""A TF2 custom training loop written for Graphcore's IPU API (PopDistStrategy, popdist,
ipu.horovod), run unedited. usage: popdist_custom_loop.py OUT_DIR [--no-shard] [--multi-worker]

Each replica records the sample ids it trains on; OUT_DIR/custom_loop-<instance>.json gets them
with the final weights. --no-shard leaves the dataset unsharded (every instance reads it all);
--multi-worker trains under IPUMultiWorkerStrategyV1 instead (which auto-shards again).
"""
import json
import os
import sys

import numpy as np
import popdist
import popdist.tensorflow
import tensorflow as tf
from tensorflow.python import ipu
from tensorflow.python.ipu import horovod as hvd
from tensorflow.python.ipu.distributed.popdist_strategy import PopDistStrategy
from tensorflow.python.ipu.ipu_multi_worker_strategy import IPUMultiWorkerStrategyV1

out_dir = sys.argv[1]
shard = "--no-shard" not in sys.argv
GLOBAL_BATCH, NUM_SAMPLES, EPOCHS, LEARNING_RATE = 16, 128, 2, 0.05

config = ipu.config.IPUConfig()
popdist.tensorflow.set_ipu_config(config, ipus_per_replica=1, configure_device=True)
config.configure_ipu_system()
strategy = IPUMultiWorkerStrategyV1() if "--multi-worker" in sys.argv else PopDistStrategy()

rng = np.random.default_rng(0)
features = rng.normal(size=(NUM_SAMPLES, 4)).astype(np.float32)
targets = (features @ np.array([[1.0], [-2.0], [0.5], [3.0]]) + 0.1).astype(np.float32)
initial_kernel = rng.normal(size=(4, 1)).astype(np.float32)

dataset = tf.data.Dataset.from_tensor_slices((np.arange(NUM_SAMPLES), features, targets))
if shard:
    # As Graphcore's documentation says: each instance takes its share of the samples.
    dataset = dataset.shard(num_shards=popdist.getNumInstances(), index=popdist.getInstanceIndex())
# The batch size is per replica (each replica reads its own batches, as on Graphcore's systems):
# every step trains on MICRO_BATCH x getNumTotalReplicas() = GLOBAL_BATCH samples.
MICRO_BATCH = GLOBAL_BATCH // popdist.getNumTotalReplicas()
dataset = dataset.batch(MICRO_BATCH, drop_remainder=True)

seen = []


def record(epoch, ids):
    seen.extend([int(epoch), int(i)] for i in ids.numpy())
    return 0


with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.layers.Dense(1, kernel_initializer=tf.constant_initializer(initial_kernel))])
    model.build((None, 4))
    optimizer = tf.keras.optimizers.SGD(LEARNING_RATE)


@tf.function
def train_step(epoch, ids, x, y):
    def replica_step(ids, x, y):
        tf.py_function(record, [epoch, ids], [tf.int64])
        with tf.GradientTape() as tape:
            per_example = tf.reduce_sum((model(x) - y) ** 2, axis=1)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    per_replica_loss = strategy.run(replica_step, args=(ids, x, y))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_loss, axis=None)


for epoch in range(EPOCHS):
    for ids, x, y in strategy.experimental_distribute_dataset(dataset):
        loss = train_step(tf.constant(epoch, tf.int64), ids, x, y)
    print(f"epoch {epoch} loss {float(loss):.6f}")

samples_this_instance = tf.constant(float(len(seen)))
kernel, bias = model.get_weights()
result = {
    "instance": popdist.getInstanceIndex(),
    "num_replicas_in_sync": strategy.num_replicas_in_sync,
    "seen": seen,
    "weights": kernel.ravel().tolist() + bias.tolist(),
    "samples_all_instances": float(hvd.allreduce(samples_this_instance, op=hvd.Sum)),
    "broadcast_from_0": float(hvd.broadcast(tf.constant(float(hvd.rank() + 7)), root_rank=0)),
    "average": float(hvd.allreduce(tf.constant(float(hvd.rank() + 1)))),
    "mean": float(ipu.distributed.allreduce(tf.constant(float(popdist.getInstanceIndex() + 1)),
                                            tf.distribute.ReduceOp.MEAN, tensor_name="mean")),
    "gathered": ipu.distributed.allgather(
        tf.constant([popdist.getInstanceIndex()])).numpy().tolist(),
}
with open(os.path.join(out_dir, f"custom_loop-{popdist.getInstanceIndex()}.json"), "w") as f:
    json.dump(result, f)
