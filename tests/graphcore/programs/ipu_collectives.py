"""Graphcore's replica collectives (replication_index, all_gather, all_to_all, reduce_scatter)
in one step over 4 replicas: an IPUStrategy's 4 local replicas as one process, PopDistStrategy's
replicas under poprun-lite; each instance writes its replicas' results as JSON, read back as a
Graphcore program reads every replica's values: through an outfeed (strategy.run returns
replica 0's)."""
import json
import sys
from pathlib import Path

import popdist
import popdist.tensorflow
import tensorflow as tf
from tensorflow.python import ipu
from tensorflow.python.ipu.distributed import popdist_strategy

config = ipu.config.IPUConfig()
if popdist.isPopdistEnvSet():
    popdist.tensorflow.set_ipu_config(config, ipus_per_replica=1, configure_device=True)
    config.configure_ipu_system()
    strategy = popdist_strategy.PopDistStrategy()
else:
    config.auto_select_ipus = 4
    config.configure_ipu_system()
    strategy = ipu.ipu_strategy.IPUStrategy()


outfeed = ipu.ipu_outfeed_queue.IPUOutfeedQueue()


@tf.function
def step():
    index = ipu.replication_ops.replication_index()
    x = tf.cast(tf.range(4) + 10 * index, tf.float32)  # replica r holds [10r, 10r+1, 10r+2, 10r+3]
    outfeed.enqueue({
        "index": index,
        "gather_4": ipu.all_to_all_op.all_gather(x, 4),
        "gather_2": ipu.all_to_all_op.all_gather(x, 2),
        "all_to_all": ipu.all_to_all_op.all_to_all(tf.reshape(x, [4, 1]), 0, 1, 4),
        "scatter_add_3": ipu.reduce_scatter_op.reduce_scatter(x[:3], 4),
        "scatter_max_2": ipu.reduce_scatter_op.reduce_scatter(x, 2, op="COLLECTIVE_OP_MAX")})


with strategy.scope():
    strategy.run(step)
results = outfeed.dequeue()  # [1 step, local replicas, ...] each
Path(sys.argv[1], f"collectives.{popdist.getInstanceIndex()}.json").write_text(json.dumps(
    {k: t.numpy()[0].tolist() for k, t in results.items()}))
