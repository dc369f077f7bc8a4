"""A TF2 custom training loop with host embeddings (an SGD table and an SGD+GA one) over
replicas: an IPUStrategy with 2 replicas as one process, PopDistStrategy under poprun-lite (the
instance's local replicas update its table; the dense weight's gradients are summed over every
replica). Also ``gen_poputil_ops.ipu_replication_normalise`` of a cross-replica sum.
Writes OUT/host_embedding_tf2_<instance>.json.

usage: host_embedding_tf2.py OUT_DIR
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import popdist  # noqa: E402
import popdist.tensorflow  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.compiler.plugin.poplar.ops import gen_poputil_ops  # noqa: E402
from tensorflow.python import ipu  # noqa: E402
from tensorflow.python.ipu import embedding_ops  # noqa: E402
from tensorflow.python.ipu.distributed.popdist_strategy import PopDistStrategy  # noqa: E402

ROWS, WIDTH, LR, LR_W, ACCUMULATION, STEPS = 10, 3, 0.05, 0.02, 3, 4
IDS = np.array([[1, 2], [2, 9], [0, 1], [3, 12], [4, 4], [9, 5], [6, 7], [1, 8]] * 2, np.int32)
INIT = (np.arange(ROWS * WIDTH, dtype=np.float32).reshape(ROWS, WIDTH) % 7) / 10

distributed = popdist.isPopdistEnvSet()
index, count = popdist.getInstanceIndex(), popdist.getNumInstances()
cfg = ipu.config.IPUConfig()
cfg.auto_select_ipus = popdist.getNumLocalReplicas() if distributed else 2
if distributed:
    popdist.tensorflow.set_ipu_config(cfg, ipus_per_replica=1)
cfg.configure_ipu_system()
strategy = PopDistStrategy() if distributed else ipu.ipu_strategy.IPUStrategy()

with strategy.scope():
    sgd = embedding_ops.create_host_embedding(
        "sgd_table", [ROWS, WIDTH], np.float32, initializer=INIT,
        optimizer_spec=embedding_ops.HostEmbeddingOptimizerSpec(LR))
    accumulated = embedding_ops.create_host_embedding(
        "ga_table", [ROWS, WIDTH], np.float32, initializer=INIT,
        optimizer_spec=embedding_ops.HostEmbeddingSGDGAOptimizerSpec(LR, ACCUMULATION))
    w = tf.Variable(tf.ones([WIDTH, 1]))
    optimizer = tf.keras.optimizers.legacy.SGD(LR_W)

dataset = tf.data.Dataset.from_tensor_slices(IDS).shard(count, index)
elements = iter(strategy.experimental_distribute_dataset(dataset))


# every replica's loss and mean, read back as a Graphcore program reads them: through an outfeed
# (an IPUStrategy's run returns replica 0's results)
feed = ipu.ipu_outfeed_queue.IPUOutfeedQueue()


@tf.function
def step():
    def replica(ids):
        with tf.GradientTape() as tape:
            rows = sgd.lookup(ids) + 2 * accumulated.lookup(ids)
            h = tf.matmul(rows, w)
            loss = tf.reduce_sum(h * h) / 2
        variables = tape.watched_variables()
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        mean = gen_poputil_ops.ipu_replication_normalise(
            ipu.cross_replica_ops.cross_replica_sum(loss))
        feed.enqueue({"loss": loss, "mean": mean})
    strategy.run(replica, args=(next(elements),))


out = {"instance": index, "instances": count, "losses": [], "means": []}
for _ in range(STEPS):
    step()
    fed = feed.dequeue()  # [1 step, local replicas] (no replica axis for one)
    out["losses"].append(np.reshape(fed["loss"], [-1]).tolist())
    out["means"].append(np.reshape(fed["mean"], [-1]).tolist())
out["sgd"] = sgd.get_embedding_tensor().numpy().tolist()
out["ga"] = accumulated.get_embedding_tensor().numpy().tolist()
out["w"] = w.numpy().ravel().tolist()
with open(os.path.join(sys.argv[1], f"host_embedding_tf2_{index}.json"), "w") as f:
    json.dump(out, f)
