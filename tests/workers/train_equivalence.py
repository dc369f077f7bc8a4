"""Trains a small model on a fixed global batch; writes OUT_DIR/<mode>-<i>.json with the weights
after every step. usage: train_equivalence.py MODES STRATEGY OUT_DIR [STEPS]

MODES: one mode or several joined by commas, run one after the other in this process, each with
a strategy and a model of its own (multi-worker with no other strategy: it makes the process a
worker of TensorFlow's cluster); a mode written MODE@STRATEGY uses that strategy in place of
STRATEGY and writes OUT_DIR/<mode>@<strategy>-<i>.json. The modes: tf2 (strategy.run in
tf.function), tf1 (graph + experimental_run_v2 + Session), keras (Model.fit), keras-loop (a
custom loop with Keras layers and a Keras optimizer made under strategy.scope()), reference (one
process, no strategy, the whole global batch). Keras is whichever the program gets (Keras 3 on
TensorFlow 2.16+ unless TF_USE_LEGACY_KERAS=1).
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import popdist_launcher  # noqa: E402

modes, default_strategy, out_dir = sys.argv[1].split(","), sys.argv[2], sys.argv[3]
steps = int(sys.argv[4]) if len(sys.argv) > 4 else 4
GLOBAL_BATCH, FEATURES, LR = 16, 6, 0.1
rng = np.random.default_rng(42)
x_all = rng.normal(size=(GLOBAL_BATCH * steps, FEATURES)).astype("float32")
y_all = (x_all @ rng.normal(size=(FEATURES, 1)) + 0.3).astype("float32")
w_init = rng.normal(size=(FEATURES, 1)).astype("float32") * 0.1
ctx = popdist_launcher.init()


def make_strategy(strategy_name):
    from popdist_launcher import strategies
    names = {"popdist": "PopDistStrategy", "horovod": "IPUHorovodStrategy",
             "multi-worker": "IPUMultiWorkerStrategy"}
    return getattr(strategies, names[strategy_name])()


def dataset(mode, strategy_name):
    """The global batches; under PopDistStrategy / IPUHorovodStrategy each instance takes its
    shard and each replica its own batches (Graphcore's semantics: the program shards and
    batches per replica), IPUMultiWorkerStrategy auto-shards and splits global batches."""
    ds = tf.data.Dataset.from_tensor_slices((x_all, y_all))
    if mode == "reference" or strategy_name == "multi-worker":
        return ds.batch(GLOBAL_BATCH)
    return ds.shard(ctx.num_instances, ctx.instance_index).batch(
        GLOBAL_BATCH // ctx.num_total_replicas)


def loss_fn(w, b, x, y):
    per_example = tf.reduce_sum((tf.matmul(x, w) + b - y) ** 2, axis=1)
    return tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)


def train_reference(strategy_name):
    history = []
    w, b = tf.Variable(w_init), tf.Variable([0.0])
    opt = tf.keras.optimizers.SGD(LR)
    for x, y in dataset("reference", strategy_name):
        with tf.GradientTape() as tape:
            loss = (tf.reduce_sum(tf.reduce_sum((tf.matmul(x, w) + b - y) ** 2, axis=1))
                    / GLOBAL_BATCH)
        opt.apply_gradients(zip(tape.gradient(loss, [w, b]), [w, b]))
        history.append(w.numpy().ravel().tolist() + b.numpy().tolist())
    return history


def train_tf2(strategy_name):
    history = []
    strategy = make_strategy(strategy_name)
    with strategy.scope():
        w = tf.Variable(w_init + ctx.instance_index)  # differs per instance: broadcast fixes it
        b = tf.Variable([0.0])
        opt = tf.keras.optimizers.SGD(LR)

    @tf.function
    def step(x, y):
        def replica_fn(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(w, b, x, y)
            opt.apply_gradients(zip(tape.gradient(loss, [w, b]), [w, b]))
        strategy.run(replica_fn, args=(x, y))

    for x, y in strategy.experimental_distribute_dataset(dataset("tf2", strategy_name)):
        step(x, y)
        history.append(w.numpy().ravel().tolist() + b.numpy().tolist())
    return history


def train_tf1(strategy_name):
    history = []
    strategy = make_strategy(strategy_name)
    graph = tf.Graph()
    with graph.as_default():
        local = ctx.num_local_replicas
        per_replica = GLOBAL_BATCH // strategy.num_replicas_in_sync
        x_ph = tf.compat.v1.placeholder(tf.float32, [local * per_replica, FEATURES])
        y_ph = tf.compat.v1.placeholder(tf.float32, [local * per_replica, 1])
        with strategy.scope():
            w = tf.compat.v1.get_variable("w", initializer=w_init + ctx.instance_index,
                                          use_resource=True)
            b = tf.compat.v1.get_variable("b", initializer=[0.0], use_resource=True)
            opt = tf.compat.v1.train.GradientDescentOptimizer(LR)

            def replica_fn():
                rid = tf.distribute.get_replica_context().replica_id_in_sync_group
                lid = rid - ctx.replica_index_offset
                x = x_ph[lid * per_replica:(lid + 1) * per_replica]
                y = y_ph[lid * per_replica:(lid + 1) * per_replica]
                loss = loss_fn(w, b, x, y)
                return opt.minimize(loss)

            train_op = strategy.group(strategy.experimental_run_v2(replica_fn))
        init = tf.compat.v1.global_variables_initializer()
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(init)
            lo = ctx.instance_index * local * per_replica
            for s in range(steps):
                batch = slice(s * GLOBAL_BATCH + lo, s * GLOBAL_BATCH + lo + local * per_replica)
                sess.run(train_op, {x_ph: x_all[batch], y_ph: y_all[batch]})
                wv, bv = sess.run([w, b])
                history.append(wv.ravel().tolist() + bv.tolist())
    return history


def train_keras(strategy_name):
    history = []
    strategy = make_strategy(strategy_name)
    with strategy.scope():
        dense = tf.keras.layers.Dense(
            1, kernel_initializer=tf.constant_initializer(w_init + ctx.instance_index))
        model = tf.keras.Sequential([tf.keras.layers.Input((FEATURES,)), dense])
        model.compile(tf.keras.optimizers.SGD(LR),
                      loss=lambda y, p: tf.reduce_sum((p - y) ** 2, axis=1))

    class Record(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            kernel, bias = dense.get_weights()
            history.append(kernel.ravel().tolist() + bias.tolist())

    model.fit(dataset("keras", strategy_name), epochs=1, callbacks=[Record()], verbose=0)
    return history


def train_keras_loop(strategy_name):
    history = []
    strategy = make_strategy(strategy_name)
    with strategy.scope():
        dense = tf.keras.layers.Dense(
            1, kernel_initializer=tf.constant_initializer(w_init + ctx.instance_index))
        model = tf.keras.Sequential([tf.keras.layers.Input((FEATURES,)), dense])
        opt = tf.keras.optimizers.SGD(LR)

    @tf.function
    def step(x, y):
        def replica_fn(x, y):
            with tf.GradientTape() as tape:
                per_example = tf.reduce_sum((model(x, training=True) - y) ** 2, axis=1)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
            variables = model.trainable_variables
            opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        strategy.run(replica_fn, args=(x, y))

    for x, y in strategy.experimental_distribute_dataset(dataset("keras-loop", strategy_name)):
        step(x, y)
        kernel, bias = dense.get_weights()
        history.append(kernel.ravel().tolist() + bias.tolist())
    return history


TRAIN = {"reference": train_reference, "tf2": train_tf2, "tf1": train_tf1, "keras": train_keras,
         "keras-loop": train_keras_loop}
unknown = [mode for mode in modes if mode.partition("@")[0] not in TRAIN]
if unknown:
    raise SystemExit(f"unknown mode(s) {unknown}")
keras_version = sys.modules[tf.keras.Model.__module__.split(".")[0]].__version__
for mode in modes:
    name, _, strategy_name = mode.partition("@")
    history = TRAIN[name](strategy_name or default_strategy)
    with open(os.path.join(out_dir, f"{mode}-{ctx.instance_index}.json"), "w") as f:
        json.dump({"history": history, "hostname": __import__("socket").gethostname(),
                   "keras": keras_version.split(".")[0]}, f)
