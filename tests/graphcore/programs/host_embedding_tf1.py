"""A TF1 recommendation-style program with host embeddings, written as Graphcore's TF1 programs
write it (run with ``--tf1`` / ``POPDIST_TF1=1``): an SGD table, an SGD+GA table and a frozen one
looked up in an IPU loop over this instance's shard of the ids, a dense weight trained on the
device, and the SDK's internal modules imported as such programs import them.
Writes OUT/host_embedding_<instance>.json.

usage: host_embedding_tf1.py OUT_DIR
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import popdist  # noqa: E402
import tensorflow.compat.v1 as tf  # noqa: E402
from tensorflow.compiler.plugin.poplar.driver.trace_pb2 import IpuTraceEvent  # noqa: E402
from tensorflow.compiler.plugin.poplar.ops import gen_ipu_ops  # noqa: E402
from tensorflow.compiler.plugin.poplar.ops import gen_popnn_ops  # noqa: E402
from tensorflow.python import ipu  # noqa: E402
from tensorflow.python.ipu import embedding_ops  # noqa: E402

ROWS, WIDTH, LR, LR_W, ACCUMULATION = 10, 3, 0.05, 0.02, 3
IDS = np.array([[1, 2], [2, 9], [0, 1], [3, 12], [4, 4], [9, 5], [6, 7], [1, 8]] * 2, np.int32)
INIT = (np.arange(ROWS * WIDTH, dtype=np.float32).reshape(ROWS, WIDTH) % 7) / 10

index, count = popdist.getInstanceIndex(), popdist.getNumInstances()
steps = len(IDS) // count
out = {"instance": index, "instances": count, "steps": steps}

# The model is built in a graph of its own and registered while that graph is not the default,
# as Graphcore's click-through-rate programs do.
graph = tf.Graph()
with graph.as_default():
    sgd = embedding_ops.create_host_embedding(
        "sgd_table", [ROWS, WIDTH], np.float32, initializer=tf.constant_initializer(INIT),
        optimizer_spec=embedding_ops.HostEmbeddingOptimizerSpec(LR))
    accumulated = embedding_ops.create_host_embedding(
        "ga_table", [ROWS, WIDTH], np.float32, initializer=tf.constant_initializer(INIT),
        optimizer_spec=embedding_ops.HostEmbeddingSGDGAOptimizerSpec(LR, ACCUMULATION))
    frozen = embedding_ops.create_host_embedding(
        "frozen_table", [ROWS, WIDTH], np.float32, initializer=tf.constant_initializer(INIT))

    dataset = tf.data.Dataset.from_tensor_slices(IDS).shard(count, index)
    infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(dataset)

    def body(loss, ids):
        rows = sgd.lookup(ids) + 2 * accumulated.lookup(ids) + frozen.lookup(ids)
        w = tf.get_variable("w", [WIDTH, 1], initializer=tf.ones_initializer())
        h = tf.matmul(rows, w)
        step_loss = tf.reduce_sum(h * h) / 2
        return step_loss, tf.train.GradientDescentOptimizer(LR_W).minimize(step_loss)

    with ipu.scopes.ipu_scope("/device:IPU:0"):
        run = ipu.ipu_compiler.compile(lambda: ipu.loops.repeat(steps, body, [0.0], infeed))
    trace = gen_ipu_ops.ipu_event_trace()

cfg = ipu.config.IPUConfig()
cfg.auto_select_ipus = 1
cfg.optimizations.combine_embedding_lookups = True
cfg.configure_ipu_system()


def error(fn):
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 (the type is part of what is checked)
        return [type(exc).__name__, str(exc)]
    return None


with graph.as_default():
    initialize = tf.global_variables_initializer()
    w_variable = tf.trainable_variables("w")[0]
with tf.Session(graph=graph) as sess:
    sess.run(initialize)
    sess.run(infeed.initializer)
    with sgd.register(sess), accumulated.register(sess), frozen.register(sess):
        out["loss"] = float(sess.run(run)[0])
    for name, embedding in (("sgd", sgd), ("ga", accumulated), ("frozen", frozen)):
        out[name] = sess.run(embedding.get_embedding_tensor()).tolist()
    out["w"] = sess.run(w_variable).ravel().tolist()
    out["trace"] = sess.run(trace).tolist()
out["variables"] = sorted(v.op.name for v in graph.get_collection("variables"))
out["register_without_session"] = error(lambda: sgd.register())
out["call"] = error(lambda: sgd(1))
out["popnn_op"] = error(lambda: gen_popnn_ops.popnn_gru_layer(1))
out["compile_begin"] = IpuTraceEvent.COMPILE_BEGIN

with open(os.path.join(sys.argv[1], f"host_embedding_{index}.json"), "w") as f:
    json.dump(out, f)
