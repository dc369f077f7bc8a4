"""The program's own module, imported before the IPU layer, with its imports sorted as usual:
every TF 2.6 Keras optimizer name and Keras 2.6 module path bound before ``from
tensorflow.python import ipu``, also kept in a dict, a default argument and a subclass."""
import keras
import tensorflow as tf
from keras.engine import data_adapter
from keras.optimizer_v2 import rmsprop as rmsprop_module
from tensorflow.keras.optimizers import SGD, Adadelta, Adagrad, Adam, Adamax, Ftrl, Nadam, Optimizer, RMSprop
from tensorflow.keras.optimizers import Adam as KerasAdam
from tensorflow.keras.optimizers.experimental import Adam as NewAdam

from names import bound_names

BY_NAME = {"rmsprop": RMSprop, "sgd": SGD}  # a registry, as programs keep them
KERAS_RMSPROP = keras.optimizers.RMSprop  # attributes read at import
TF_RMSPROP = tf.keras.optimizers.RMSprop


class ScaledRMSprop(RMSprop):
    """A subclass defined before the IPU import."""


def make(optimizer_class=RMSprop, **kwargs):  # a default argument
    return optimizer_class(**kwargs)


def optimizer():
    return RMSprop(lr=0.001, rho=0.9, epsilon=1e-08, decay=0.0)


def bound():
    """The names as this module holds them when the program runs."""
    return bound_names("models", globals())
