"""The TensorFlow internals the strategies and the IPU layer build on, imported in one place.

``tf.distribute`` exposes strategies but not the classes needed to extend them; these imports are
the whole dependency on TensorFlow's private modules, so a TensorFlow upgrade touches this file.
Checked against TensorFlow 2.15.
"""
from tensorflow.python.client import session  # noqa: F401 (TF1 sessions of replicated programs)
from tensorflow.python.distribute import collective_all_reduce_strategy  # noqa: F401
from tensorflow.python.distribute import cross_device_ops as cross_device_ops_lib  # noqa: F401
from tensorflow.python.distribute import distribute_lib  # noqa: F401
from tensorflow.python.distribute import device_util  # noqa: F401
from tensorflow.python.distribute import distribute_utils  # noqa: F401
from tensorflow.python.distribute.v1 import input_lib as input_lib_v1  # noqa: F401
from tensorflow.python.distribute import input_util  # noqa: F401
from tensorflow.python.distribute import mirrored_strategy  # noqa: F401
from tensorflow.python.distribute import one_device_strategy  # noqa: F401
from tensorflow.python.distribute import reduce_util  # noqa: F401
from tensorflow.python.distribute import values as values_lib  # noqa: F401
from tensorflow.python.distribute.cluster_resolver import TFConfigClusterResolver  # noqa: F401
from tensorflow.python.eager import context as eager_context  # noqa: F401 (collective ops)
from tensorflow.python.eager.polymorphic_function import polymorphic_function  # noqa: F401
from tensorflow.python.ops import control_flow_util  # noqa: F401
from tensorflow.python.ops import gen_resource_variable_ops  # noqa: F401
from tensorflow.python.ops import ref_variable  # noqa: F401 (ipu host embedding tables)
from tensorflow.python.ops import resource_variable_ops  # noqa: F401
from tensorflow.python.ops import variable_scope  # noqa: F401 (the variables' synchronization)
from tensorflow.python.trackable.base import CheckpointInitialValue  # noqa: F401
from tensorflow.python.util import nest  # noqa: F401
