"""One worker of a 2-worker IPUMultiWorkerStrategyV1 cluster that the program builds itself (a
cluster resolver and a server of its own, no launcher), running an IPUEstimator as Graphcore's
``_test_ipu_estimator_train_with_host_call`` does: the gradients computed on the IPU, applied
on the host (host_call), ``master`` the worker's own server; then ``train_and_evaluate``, in
which such workers only train. Writes OUT/estimator-cluster-<task>.json.

usage: multi_worker_estimator_cluster.py TASK PORT0 PORT1 OUT_DIR
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python import ipu  # noqa: E402
from tensorflow.python.distribute.cluster_resolver import SimpleClusterResolver  # noqa: E402

tf.compat.v1.disable_v2_behavior()
task, ports, out_dir = int(sys.argv[1]), sys.argv[2:4], sys.argv[4]
spec = tf.train.ClusterSpec({"worker": [f"localhost:{p}" for p in ports]})
strategy = ipu.ipu_multi_worker_strategy.IPUMultiWorkerStrategyV1(
    SimpleClusterResolver(spec, task_type="worker", task_id=task), variables_on_host=True)
server = tf.distribute.Server(spec, job_name="worker", task_index=task,
                              config=strategy.update_config_proto(tf.compat.v1.ConfigProto()))
optimizer = tf.compat.v1.train.MomentumOptimizer(learning_rate=0.5, momentum=0.0)
features = np.array([[1.0], [2.0]], dtype=np.float32)
out = {"task": task, "input_contexts": []}


def model_fn(features, labels, mode):
    w = tf.compat.v1.get_variable("w", initializer=2.0)
    loss = tf.compat.v1.losses.mean_squared_error(labels=labels, predictions=features * w)
    grads = [g for g, _ in optimizer.compute_gradients(loss)]

    def apply_on_host(*grads):
        return optimizer.apply_gradients(zip(grads, tf.compat.v1.trainable_variables()))

    return ipu.ipu_estimator.IPUEstimatorSpec(mode=mode, loss=loss, train_op=tf.identity(loss),
                                              host_call=(apply_on_host, grads))


def input_fn(input_context):
    out["input_contexts"].append([input_context.num_input_pipelines,
                                  input_context.input_pipeline_id])
    dataset = tf.data.Dataset.from_tensor_slices((features, features))
    return dataset.batch(1, drop_remainder=True).repeat().shard(
        input_context.num_input_pipelines, input_context.input_pipeline_id)


config = ipu.ipu_run_config.RunConfig(master=server.target, train_distribute=strategy,
                                      model_dir=os.path.join(out_dir, f"model-{task}"))
estimator = ipu.ipu_estimator.IPUEstimator(model_fn=model_fn, config=config)
out["w"], out["global_step"] = [], []
for _ in range(3):
    estimator.train(input_fn, steps=1)
    out["w"].append(float(estimator.get_variable_value("w")))
    out["global_step"].append(int(estimator.get_variable_value("global_step")))
metrics, _ = tf.estimator.train_and_evaluate(
    estimator, tf.estimator.TrainSpec(input_fn, max_steps=4), tf.estimator.EvalSpec(input_fn))
out["train_and_evaluate"] = {"metrics": metrics,
                             "global_step": int(estimator.get_variable_value("global_step")),
                             "evaluated": os.path.isdir(os.path.join(out_dir, f"model-{task}",
                                                                     "eval"))}
with open(os.path.join(out_dir, f"estimator-cluster-{task}.json"), "w") as f:
    json.dump(out, f)
