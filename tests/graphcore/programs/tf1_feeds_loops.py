"""TF1 graph-mode checks of the IPU feed, loop, compile, gradient accumulation, pipelining and
hook APIs, written as Graphcore's programs write them (unedited imports). Writes OUT/tf1.json.

usage: tf1_feeds_loops.py OUT_DIR
"""
import json
import logging
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python import ipu  # noqa: E402
from tensorflow.python.ipu.gradient_accumulation import GradientAccumulationReductionMethod  # noqa: E402

tf.compat.v1.disable_eager_execution()
out = {}
rng = np.random.default_rng(0)
X = rng.normal(size=(48, 3)).astype("float32")
Y = rng.normal(size=(48, 1)).astype("float32")
W1 = (np.eye(3) * 0.5).astype("float32")
W2 = np.ones((3, 1), np.float32)


def increasing(n, shape):
    return tf.data.Dataset.range(n).map(lambda i: tf.fill(shape, tf.cast(i, tf.float32))).repeat()


def error(fn):
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 (the type is part of what is checked)
        return [type(exc).__name__, str(exc)]
    return None


def fresh():
    tf.compat.v1.reset_default_graph()
    cfg = ipu.config.IPUConfig()
    cfg.auto_select_ipus = 1
    cfg.ipu_model.compile_ipu_code = False
    cfg.configure_ipu_system()


# ---- infeeds and loops --------------------------------------------------------------------------
fresh()
infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(increasing(10, [4, 4]))


def body(v, x):
    return v + x


def net(v):
    return ipu.loops.repeat(20, body, (v), infeed)


v = tf.compat.v1.placeholder(np.float32, [4, 4])
with ipu.scopes.ipu_scope("/device:IPU:0"):
    res = ipu.ipu_compiler.compile(net, inputs=[v])
with tf.compat.v1.Session() as sess:
    sess.run(infeed.initializer)
    first = sess.run(res, {v: np.ones([4, 4], np.float32)})
    second = sess.run(res, {v: np.ones([4, 4], np.float32)})
out["repeat_non_tuple"] = {"type": type(first).__name__, "len": len(first),
                           "first": first[0].tolist(), "second": second[0].tolist()}

fresh()
pairs = increasing(3, [4, 4]).map(lambda v: (v, (v + 10.0) / 2.0))
infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(pairs)
with ipu.scopes.ipu_scope("/device:IPU:0"):
    res = ipu.ipu_compiler.compile(
        lambda: ipu.loops.repeat(5, lambda v, a, b: v + a + b, [tf.zeros([4, 4])], infeed))
with tf.compat.v1.Session() as sess:
    sess.run(infeed.initializer)
    out["repeat_tuple"] = sess.run(res)[0].tolist()
out["number_of_tuple_elements"] = infeed.number_of_tuple_elements

fresh()
infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(increasing(2, [4, 4]))


def two_repeats():
    r = ipu.loops.repeat(5, lambda v, x: v + x, [tf.zeros([4, 4])], infeed)
    return ipu.loops.repeat(5, lambda v, x: v + x, [r], infeed)


def independent_repeats():
    a = ipu.loops.repeat(3, lambda v, x: v + 10 * x, [tf.zeros([4, 4])], infeed)
    b = ipu.loops.repeat(1, lambda v, x: v + x, [tf.zeros([4, 4])], infeed)
    return a, b


with ipu.scopes.ipu_scope("/device:IPU:0"):
    res = ipu.ipu_compiler.compile(two_repeats)
    res2 = ipu.ipu_compiler.compile(independent_repeats)
init = infeed.initializer
with tf.compat.v1.Session() as sess:
    sess.run(init)
    out["multiple_repeats"] = sess.run(res)[0].tolist()
    sess.run(init)
    out["repeats_in_program_order"] = [r[0].tolist() for r in sess.run(res2)]

fresh()
named = increasing(3, [4, 4]).map(lambda v: {"a": v, "b": (v + 10.0) / 2.0})
infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(named)
with ipu.scopes.ipu_scope("/device:IPU:0"):
    res = ipu.ipu_compiler.compile(lambda: ipu.loops.repeat(
        5, lambda v1, v2, b, a: (v1 + a, v2 + b), [tf.zeros([4, 4]), tf.zeros([4, 4])], infeed))
with tf.compat.v1.Session() as sess:
    sess.run(infeed.initializer)
    out["repeat_named"] = [float(r[0][0]) for r in sess.run(res)]

fresh()
ds = tf.data.Dataset.range(100).map(lambda i: {"a": {"x": tf.cast(i, tf.float32)}})
infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(ds)
with ipu.scopes.ipu_scope("/device:IPU:0"):
    [res] = ipu.ipu_compiler.compile(
        lambda: ipu.loops.repeat(3, lambda v, a: v + a["x"], [0.0], infeed))
with tf.compat.v1.Session() as sess:
    sess.run(infeed.initializer)
    out["nested_dict_not_unpacked"] = float(sess.run(res))

fresh()
infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(increasing(10, []))
with ipu.scopes.ipu_scope("/device:IPU:0"):
    res = ipu.ipu_compiler.compile(
        lambda: ipu.loops.while_loop(lambda i, s: i < 6, lambda i, s, x: (i + 1, s + x),
                                     [0, 0.0], infeed))
with tf.compat.v1.Session() as sess:
    sess.run(infeed.initializer)
    out["while_loop"] = [float(r) for r in sess.run(res)]

fresh()
out["undefined_shape"] = error(lambda: ipu.ipu_infeed_queue.IPUInfeedQueue(
    tf.data.Dataset.range(10).batch(3)))
infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(tf.data.Dataset.range(5))
infeed.initializer  # noqa: B018
out["initializer_twice"] = error(lambda: infeed.initializer)
out["body_arity"] = error(lambda: ipu.loops.repeat(2, lambda a, b: a, [1.0]))
out["body_types"] = error(lambda: ipu.loops.repeat(2, lambda a: tf.cast(a, tf.int32), [1.0]))

fresh()
ds = tf.data.Dataset.from_tensor_slices(np.arange(5, dtype=np.float32))
infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(ds)
init_op, delete_op = infeed.initializer, infeed.deleter
with ipu.scopes.ipu_scope("/device:IPU:0"):
    [res] = ipu.ipu_compiler.compile(lambda: ipu.loops.repeat(5, lambda v, x: v + x, [0.0], infeed))
with tf.compat.v1.Session() as sess:
    restarts = []
    for _ in range(2):
        sess.run(init_op)
        restarts.append(float(sess.run(res)))
        sess.run(delete_op)
out["infeed_restart"] = restarts

# ---- outfeeds ---------------------------------------------------------------------------------
fresh()
infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(increasing(100, [2]))
all_q = ipu.ipu_outfeed_queue.IPUOutfeedQueue()
last_q = ipu.ipu_outfeed_queue.IPUOutfeedQueue(outfeed_mode=ipu.ipu_outfeed_queue.IPUOutfeedMode.LAST)
dict_q = ipu.ipu_outfeed_queue.IPUOutfeedQueue()
out["dequeue_before_enqueue"] = error(all_q.dequeue)


def outfeed_body(v, x):
    v = v + x
    return v, all_q.enqueue(v), last_q.enqueue([v, v * 2]), dict_q.enqueue({"sum": tf.reduce_sum(v), "step": 7})


with ipu.scopes.ipu_scope("/device:IPU:0"):
    res = ipu.ipu_compiler.compile(lambda: ipu.loops.repeat(4, outfeed_body, [tf.zeros([2])], infeed))
deq_all, deq_last, deq_dict = all_q.dequeue(), last_q.dequeue(), dict_q.dequeue()
with tf.compat.v1.Session() as sess:
    sess.run(infeed.initializer)
    sess.run(res)
    sess.run(res)
    got_all = sess.run(deq_all)           # both runs: 8 elements (delayed read)
    got_last = sess.run(deq_last)
    got_dict = sess.run(deq_dict)
    empty = sess.run(deq_all)             # nothing new since the last dequeue
    sess.run(res)
    again = sess.run(deq_all)             # continuous dequeuing: only the new run's elements
out["outfeed_all"] = got_all.tolist()
out["outfeed_last"] = [t.tolist() for t in got_last]
out["outfeed_dict"] = {k: v.tolist() for k, v in got_dict.items()}
out["outfeed_empty_shape"] = list(empty.shape)
out["outfeed_continuous"] = again.tolist()

# ---- compile --------------------------------------------------------------------------------
fresh()
spec = tf.estimator.EstimatorSpec(tf.estimator.ModeKeys.PREDICT, predictions=tf.constant(1.0))
out["compile_estimator_spec"] = error(lambda: ipu.ipu_compiler.compile(lambda: spec))
only_op = ipu.ipu_compiler.compile(lambda: tf.no_op())
out["compile_op_only"] = type(only_op).__name__
out["compile_multi"] = len(ipu.ipu_compiler.compile(lambda a, b: (a + b, a * b), [1.0, 2.0]))


# ---- gradient accumulation (GradientAccumulationOptimizerV2 in a loops.repeat loop) ----------
def ga_run(method, mini_batches, updates, momentum=0.9):
    fresh()
    ds = tf.data.Dataset.from_tensor_slices((X, Y)).batch(2, drop_remainder=True)
    infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(ds)
    losses = ipu.ipu_outfeed_queue.IPUOutfeedQueue()

    def model(x, y):
        with tf.compat.v1.variable_scope("vs", use_resource=True, reuse=tf.compat.v1.AUTO_REUSE):
            w = tf.compat.v1.get_variable("w", initializer=W2)
        loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
        opt = ipu.optimizers.GradientAccumulationOptimizerV2(
            tf.compat.v1.train.MomentumOptimizer(0.1, momentum), mini_batches,
            reduction_method=method)
        return losses.enqueue(loss), opt.minimize(loss, global_step=tf.compat.v1.train.get_or_create_global_step())

    with ipu.scopes.ipu_scope("/device:IPU:0"):
        res = ipu.ipu_compiler.compile(
            lambda: ipu.loops.repeat(mini_batches * updates, model, [], infeed))
    ipu.utils.move_variable_initialization_to_cpu()
    with tf.compat.v1.Session() as sess:
        sess.run(infeed.initializer)
        sess.run(tf.compat.v1.global_variables_initializer())
        sess.run(res)
        w = sess.run(tf.compat.v1.trainable_variables()[0])
        return {"w": w.ravel().tolist(), "losses": sess.run(losses.dequeue()).tolist(),
                "global_step": int(sess.run(tf.compat.v1.train.get_global_step()))}


out["ga"] = {m: ga_run(m, 4, 3) for m in ("sum", "mean", "running_mean")}
out["ga_invalid_method"] = error(lambda: ipu.optimizers.GradientAccumulationOptimizerV2(
    tf.compat.v1.train.GradientDescentOptimizer(0.1), 2, reduction_method="median"))
out["ga_invalid_count"] = error(lambda: ipu.optimizers.GradientAccumulationOptimizerV2(
    tf.compat.v1.train.GradientDescentOptimizer(0.1), 0))


# ---- pipelining ------------------------------------------------------------------------------
def pipeline_run(count, repeat, method="sum", outfeed_loss=True, accumulate=False, mask=None,
                 named_device=False):
    """named_device: placed with tf.device("/device:IPU:0") rather than ipu_scope, initializers
    moved to the CPU (Graphcore's TF1 model-parallelism notes)."""
    fresh()
    ds = tf.data.Dataset.from_tensor_slices({"x": X, "y": Y}).batch(2, drop_remainder=True)
    infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(ds)
    outfeed = ipu.ipu_outfeed_queue.IPUOutfeedQueue()

    def stage1(lr, x, y):
        w1 = tf.compat.v1.get_variable("w1", initializer=W1, use_resource=True)
        return lr, tf.matmul(x, w1), y

    def stage2(lr, h, y):
        w2 = tf.compat.v1.get_variable("w2", initializer=W2, use_resource=True)
        return lr, tf.reduce_mean((tf.matmul(h, w2) - y) ** 2), tf.reduce_sum(h)

    def optimizer_function(lr, loss, hsum):
        return ipu.pipelining_ops.OptimizerFunctionOutput(
            tf.compat.v1.train.GradientDescentOptimizer(lr), loss)

    def model(lr):
        return ipu.pipelining_ops.pipeline(
            [stage1, stage2], gradient_accumulation_count=count, repeat_count=repeat, inputs=[lr],
            infeed_queue=infeed, outfeed_queue=outfeed, optimizer_function=optimizer_function,
            outfeed_loss=outfeed_loss, accumulate_outfeed=accumulate, outfeed_mask=mask,
            reduction_method=method, pipeline_schedule=ipu.pipelining_ops.PipelineSchedule.Grouped,
            device_mapping=[0, 1])

    lr = tf.compat.v1.placeholder(np.float32, [])
    with tf.compat.v1.device("/device:IPU:0") if named_device else ipu.scopes.ipu_scope("/device:IPU:0"):
        res = ipu.ipu_compiler.compile(model, inputs=[lr])
    if named_device:
        ipu.utils.move_variable_initialization_to_cpu()
    deq = outfeed.dequeue()
    with tf.compat.v1.Session() as sess:
        sess.run(infeed.initializer)
        sess.run(tf.compat.v1.global_variables_initializer())
        sess.run(res, {lr: 0.1})
        w1, w2 = sess.run(tf.compat.v1.trainable_variables())
        outfed = sess.run(deq)
    return {"w1": w1.ravel().tolist(), "w2": w2.ravel().tolist(),
            "outfeed": [np.asarray(o).tolist() for o in outfed] if isinstance(outfed, (list, tuple))
            else np.asarray(outfed).tolist()}


out["pipeline"] = {"sum": pipeline_run(4, 2), "mean": pipeline_run(4, 2, "mean"),
                   "accumulated": pipeline_run(3, 2, accumulate=True),
                   "mask": pipeline_run(2, 1, outfeed_loss=False, mask=[True, False, True]),
                   "named_device": pipeline_run(4, 2, named_device=True)}

fresh()
infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(tf.data.Dataset.from_tensor_slices(X).batch(4, drop_remainder=True))
outfeed = ipu.ipu_outfeed_queue.IPUOutfeedQueue()


def only_stage(x):
    w = tf.compat.v1.get_variable("w", initializer=W2, use_resource=True)
    return {"y": tf.matmul(x, w)}


with ipu.scopes.ipu_scope("/device:IPU:0"):
    res = ipu.ipu_compiler.compile(lambda: ipu.pipelining_ops.pipeline(
        [only_stage], gradient_accumulation_count=3, repeat_count=2, infeed_queue=infeed,
        outfeed_queue=outfeed))
deq = outfeed.dequeue()
with tf.compat.v1.Session() as sess:
    sess.run(infeed.initializer)
    sess.run(tf.compat.v1.global_variables_initializer())
    sess.run(res)
    out["pipeline_inference_dict"] = list(sess.run(deq)["y"].shape)
out["pipeline_needs_outfeed"] = error(lambda: ipu.pipelining_ops.pipeline(
    [lambda: tf.constant(1.0)], gradient_accumulation_count=2))
out["pipeline_bad_method"] = error(lambda: ipu.pipelining_ops.pipeline(
    [lambda: tf.constant(1.0)], gradient_accumulation_count=2, reduction_method="median"))

# ---- IPULoggingTensorHook ----------------------------------------------------------------------
records = []
handler = logging.Handler()
handler.emit = lambda record: records.append(record.getMessage())
logging.getLogger("popdist_launcher.ipu.ipu_session_run_hooks").addHandler(handler)
logging.getLogger("popdist_launcher.ipu.ipu_session_run_hooks").setLevel(logging.INFO)
out["hook_illegal_args"] = error(lambda: ipu.ipu_session_run_hooks.IPULoggingTensorHook())
out["hook_both_args"] = error(lambda: ipu.ipu_session_run_hooks.IPULoggingTensorHook(every_n_iter=1, every_n_secs=1))
fresh()
hook = ipu.ipu_session_run_hooks.IPULoggingTensorHook(every_n_iter=2, at_end=True)
hook_all = ipu.ipu_session_run_hooks.IPULoggingTensorHook(
    at_end=True, logging_mode=ipu.ipu_session_run_hooks.IPULoggingTensorHook.LoggingMode.ALL)
out["hook_missing_log"] = error(ipu.ipu_session_run_hooks.IPULoggingTensorHook(at_end=True).begin)
counter = tf.compat.v1.get_variable("counter", initializer=0.0, use_resource=True)


def hook_body():
    c = counter.assign_add(1.0)
    return tf.group(hook.log({"count": c}), hook_all.log({"doubled": 2 * c}))


with ipu.scopes.ipu_scope("/device:IPU:0"):
    step = ipu.ipu_compiler.compile(hook_body)
out["hook_log_twice"] = error(lambda: hook.log({"x": tf.constant(1.0)}))
with tf.compat.v1.train.MonitoredSession(hooks=[hook, hook_all]) as sess:
    for _ in range(3):
        sess.run(step)
out["hook_messages"] = records

# ---- utils ----------------------------------------------------------------------------------
fresh()
r = tf.random.uniform([3])
draws = []
for _ in range(2):
    ipu.utils.reset_ipu_seed(5)
    with tf.compat.v1.Session(graph=tf.compat.v1.get_default_graph()) as sess:
        pass
fresh()
ipu.utils.reset_ipu_seed(5)
r = tf.random.uniform([3])
with tf.compat.v1.Session() as sess:
    draws.append(sess.run(r).tolist())
fresh()
ipu.utils.reset_ipu_seed(5)
r = tf.random.uniform([3])
with tf.compat.v1.Session() as sess:
    draws.append(sess.run(r).tolist())
out["seed_draws"] = draws
fresh()
with ipu.scopes.ipu_scope("/device:IPU:0"):
    w = tf.compat.v1.get_variable("w", shape=[2], initializer=tf.compat.v1.random_normal_initializer())
ipu.utils.move_variable_initialization_to_cpu()
init_ops = [op for op in tf.compat.v1.get_default_graph().get_operations() if op.name.startswith("w/Initializer")]
out["init_on_cpu"] = sorted({op.device for op in init_ops})

with open(os.path.join(sys.argv[1], "tf1.json"), "w") as f:
    json.dump(out, f)
