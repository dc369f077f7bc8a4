"""Horovod's two TensorFlow elastic states synced once, outside ``hvd.elastic.run``, from
different starts: rank 0's Keras optimizer has taken a step (its variables exist), the others'
has not; every rank's model and plain variable start from its own values.

usage: elastic_states_sync.py OUT_DIR     writes OUT_DIR/states-<rank>.json: after the syncs,
the model's and optimizer's variables, the plain variable and the synced counters.
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import horovod.tensorflow.keras as hvd  # noqa: E402
from horovod.tensorflow.elastic import TensorFlowState  # noqa: E402

hvd.init()
rank = hvd.rank()
model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(
    2, kernel_initializer=tf.keras.initializers.Constant(rank + 1.0))])
optimizer = tf.keras.optimizers.Adam(0.1)
if rank == 0:  # a step with zero gradients: the variables exist, the weights stay
    optimizer.apply_gradients([(tf.zeros_like(v), v) for v in model.trainable_variables])
keras_state = hvd.elastic.TensorFlowKerasState(model, optimizer, step=10 * (rank + 1))
keras_state.sync()
plain = tf.Variable(np.full(4, rank + 0.5))
plain_state = TensorFlowState([plain], commits=rank + 3)
plain_state.sync()
with open(os.path.join(sys.argv[1], f"states-{rank}.json"), "w") as f:
    json.dump({"model": [v.numpy().ravel().tolist() for v in model.variables],
               "optimizer": [np.asarray(v.numpy()).ravel().tolist()
                             for v in optimizer.variables()],
               "plain": plain.numpy().tolist(), "step": keras_state.step,
               "commits": plain_state.commits}, f)
