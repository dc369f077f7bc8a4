"""An IPUEstimator with PopDistStrategy that trains to a fixed global step, checkpointing every
step in a shared model_dir, and resumes from it when started again: the elastic-restart program.

usage: elastic_estimator.py MODEL_DIR OUT_DIR MAX_STEPS [KILL_AT_STEP KILLED]
Every step's global batch is the same 12 rows (instance i of n takes its 12/n), so each step is one
full-batch gradient-descent step whatever n is: the final weights are GD applied MAX_STEPS times
(reference()). On the first attempt the instances in the comma-separated KILLED kill themselves
with SIGKILL once the global step reaches KILL_AT_STEP. Instance 0 writes OUT_DIR/final.json.
"""
import json
import os
import signal
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402

ROWS, FEATURES, LR = 12, 3, 0.1
_rng = np.random.default_rng(7)
X = _rng.normal(size=(ROWS, FEATURES)).astype("float32")
Y = (X @ np.array([[1.0], [-2.0], [0.5]], "float32") + 0.25).astype("float32")
W0 = np.full((FEATURES, 1), 0.1, "float32")


def reference(steps):
    """Weights and bias after ``steps`` full-batch steps of the model below, in NumPy."""
    w, b = W0.astype("float64"), 0.0
    for _ in range(steps):
        err = X @ w + b - Y
        w = w - LR * 2 * X.T @ err / ROWS
        b = b - LR * 2 * float(err.mean())
    return w.ravel().tolist(), b


def main():
    import tensorflow as tf

    import popdist_launcher
    from popdist_launcher import ipu
    from popdist_launcher.strategies import PopDistStrategy

    model_dir, out_dir, max_steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    kill_at = int(sys.argv[4]) if len(sys.argv) > 4 else -1
    killed = [int(i) for i in sys.argv[5].split(",")] if len(sys.argv) > 5 else []
    ctx = popdist_launcher.init()
    n, i = ctx.num_instances, ctx.instance_index

    def model_fn(features, labels, mode, params):
        w = tf.compat.v1.get_variable("w", initializer=W0, use_resource=True)
        b = tf.compat.v1.get_variable("b", initializer=0.0, use_resource=True)
        loss = tf.reduce_mean((tf.matmul(features, w) + b - labels) ** 2)
        train_op = tf.compat.v1.train.GradientDescentOptimizer(LR).minimize(
            loss, global_step=tf.compat.v1.train.get_global_step())
        return ipu.ipu_estimator.IPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    def input_fn(params):
        ds = tf.data.Dataset.from_tensor_slices((X, Y)).shard(n, i)
        return ds.batch(params["batch_size"], drop_remainder=True).repeat()

    class KillAt(tf.estimator.SessionRunHook):
        def before_run(self, run_context):
            return tf.estimator.SessionRunArgs(tf.compat.v1.train.get_global_step())

        def after_run(self, run_context, run_values):
            if run_values.results >= kill_at:
                os.kill(os.getpid(), signal.SIGKILL)

    hooks = [KillAt()] if ctx.restart_count == 0 and i in killed else []
    config = ipu.ipu_run_config.RunConfig(
        ipu_run_config=ipu.ipu_run_config.IPURunConfig(iterations_per_loop=1),
        train_distribute=PopDistStrategy(), model_dir=model_dir, save_checkpoints_steps=1,
        save_summary_steps=0, log_step_count_steps=None, keep_checkpoint_max=3)
    estimator = ipu.ipu_estimator.IPUEstimator(model_fn, config=config, train_batch_size=ROWS)
    resumed_at = int(estimator.get_variable_value("global_step")) \
        if estimator.latest_checkpoint() else 0
    estimator.train(input_fn, max_steps=max_steps, hooks=hooks)
    if i == 0:
        with open(os.path.join(out_dir, "final.json"), "w") as f:
            json.dump({"w": estimator.get_variable_value("w").ravel().tolist(),
                       "b": float(estimator.get_variable_value("b")),
                       "global_step": int(estimator.get_variable_value("global_step")),
                       "resumed_at": resumed_at, "attempt": ctx.restart_count,
                       "num_instances": n}, f)


if __name__ == "__main__":
    main()
