"""An IPU program written against NumPy 1.x (``np.Inf``, ``np.product``, ``np.float``, ``np.cast``
...): it prepares its data with those names, trains a linear model on its shard under
PopDistStrategy and writes what each name is, as NumPy 2 names it, to OUT/numpy1-<instance>.json.

usage: numpy1_names.py OUT_DIR
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402

NAMES = ("Inf Infinity infty PINF NINF NaN PZERO NZERO float_ complex_ cfloat singlecomplex "
         "longfloat longcomplex clongfloat string_ unicode_ int0 uint0 bool8 object0 str0 bytes0 "
         "void0 product cumproduct alltrue sometrue round_ mat row_stack trapz cast asfarray "
         "find_common_type in1d msort issubclass_ safe_eval fastCopyAndTranspose sctypes "
         "obj2sctype sctype2char issctype issubsctype maximum_sctype nbytes float int object str "
         "complex unicode add_newdoc add_docstring byte_bounds DataSource compare_chararrays "
         "format_parser tracemalloc_domain").split()
out_dir = sys.argv[1]

# Before TensorFlow imports: the program is an IPU program from NumPy's import on.
EPSILON = np.finfo(np.float_).eps
import tensorflow as tf  # noqa: E402
from tensorflow.python import ipu  # noqa: E402
from tensorflow.python.ipu.distributed.popdist_strategy import PopDistStrategy  # noqa: E402

import popdist  # noqa: E402
import popdist.tensorflow  # noqa: E402

config = ipu.config.IPUConfig()
popdist.tensorflow.set_ipu_config(config, ipus_per_replica=1)
config.configure_ipu_system()
rng = np.random.default_rng(0)
x = rng.normal(size=(32, 3)).astype(np.float)  # float64, as np.float was Python's float
y = np.cast[np.float32](x @ np.array([[1.0], [-2.0], [0.5]]))
x = np.asfarray(x, dtype=np.int)  # an integer dtype: float64, as NumPy 1.x did
size = int(np.product(x.shape))
scale = float(np.cumproduct([1.0, 2.0])[-1])
finite = bool(np.alltrue(np.isfinite(x))) and not np.sometrue(np.isnan(x))
lowest = float(np.amin(np.where(np.isfinite(x), x, np.Inf)))
index, count = popdist.getInstanceIndex(), popdist.getNumInstances()
dataset = tf.data.Dataset.from_tensor_slices((x.astype(np.float32), y)).shard(count, index)
dataset = dataset.batch(16 // count // popdist.getNumLocalReplicas(), drop_remainder=True).repeat()
with PopDistStrategy().scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1, kernel_initializer="zeros")])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1 / scale), loss="mse",
                  steps_per_execution=2)
    history = model.fit(dataset, epochs=2, steps_per_epoch=2, verbose=0)


def describe(name):
    value = getattr(np, name)
    return getattr(value, "__name__", None) or repr(value)


result = {
    "kernel": model.get_weights()[0].ravel().tolist(),
    "loss": [float(v) for v in history.history["loss"]],
    "size": size, "scale": scale, "finite": finite, "lowest": lowest, "epsilon": float(EPSILON),
    "names": {name: describe(name) for name in NAMES},
    "checks": {
        "product": int(np.product([[2, 3], [4, 5]])), "cumproduct": np.cumproduct([1, 2, 3]).tolist(),
        "round_": np.round_([0.5, 1.5, 2.5]).tolist(), "row_stack": np.row_stack(([1, 2], [3, 4])).tolist(),
        "trapz": float(np.trapz([1.0, 2.0, 3.0])), "cast": str(np.cast["int8"]([1.7, -2.2]).dtype),
        "cast_values": np.cast[np.int8]([1.7, -2.2]).tolist(),
        "asfarray": str(np.asfarray([1, 2], dtype=np.float32).dtype),
        "find_common_type": [str(np.find_common_type([np.int64, np.float32], [])),
                             str(np.find_common_type([np.float32], [np.int64, np.float64])),
                             str(np.find_common_type([np.float32], [complex]))],
        "in1d": np.in1d([[0, 1], [2, 5]], [1, 2]).tolist(),
        "msort": np.msort([[3, 1], [1, 2]]).tolist(),
        "mat": type(np.mat([[1, 2]])).__name__,
        "issubclass_": [np.issubclass_(np.int32, np.integer), np.issubclass_(3, int)],
        "safe_eval": np.safe_eval("[1, (2, 'a')]"),
        "fastCopyAndTranspose": np.fastCopyAndTranspose([[1, 2, 3]]).tolist(),
        "sctype2char": np.sctype2char(np.float32), "obj2sctype": np.obj2sctype("f8").__name__,
        "issctype": [np.issctype(np.int32), np.issctype(int), np.issctype(np.object_)],
        "issubsctype": np.issubsctype(np.float32, np.floating),
        "maximum_sctype": np.maximum_sctype(np.int8).__name__,
        "nbytes": np.nbytes[np.float16], "sctypes_int": [t.__name__ for t in np.sctypes["int"]],
        "NZERO_sign": float(np.copysign(1.0, np.NZERO)),
    },
}
with open(os.path.join(out_dir, f"numpy1-{index}.json"), "w") as f:
    json.dump(result, f)
