"""A plain Horovod program, no launcher-specific code: hvd.init() must just work."""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import horovod.tensorflow as hvd  # noqa: E402
import tensorflow as tf  # noqa: E402

hvd.init()
total = hvd.allreduce(tf.constant([float(hvd.rank() + 1)]), op=hvd.Sum)
gathered = hvd.allgather(tf.constant([hvd.rank()]))
result = {"rank": hvd.rank(), "size": hvd.size(), "local_rank": hvd.local_rank(),
          "local_size": hvd.local_size(), "sum": float(total.numpy()[0]),
          "gathered": gathered.numpy().tolist()}
with open(os.path.join(sys.argv[1], f"hvd-{hvd.rank()}.json"), "w") as f:
    json.dump(result, f)
