"""What an IPU program sees of its environment under poprun-lite, and Horovod through
ipu.horovod still working: writes OUT_DIR/environment-<rank>.json with the HOROVOD_* variables
in os.environ after NumPy's import, after TensorFlow's and the IPU layer's, and after
hvd.init(), with Horovod's rank, size and a sum over the instances.

usage: poprun_environment.py OUT_DIR
"""
import json
import os
import sys


def horovod_variables():
    return sorted(name for name in os.environ if name.startswith("HOROVOD_"))


import numpy as np  # noqa: E402

after_numpy = horovod_variables()
import tensorflow as tf  # noqa: E402
from tensorflow.python import ipu  # noqa: E402,F401
from tensorflow.python.ipu import horovod as hvd  # noqa: E402

after_imports = horovod_variables()
hvd.init()
out = {
    "after_numpy": after_numpy, "after_imports": after_imports,
    "after_init": horovod_variables(), "rank": hvd.rank(), "size": hvd.size(),
    "sum": float(hvd.allreduce(tf.constant(np.float32(hvd.rank() + 1)), op=hvd.Sum)),
}
with open(os.path.join(sys.argv[1], f"environment-{hvd.rank()}.json"), "w") as f:
    json.dump(out, f)
