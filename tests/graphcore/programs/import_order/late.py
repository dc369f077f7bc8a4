"""A module imported after the IPU layer binds the same names."""
import keras
import tensorflow as tf
from keras.engine import data_adapter
from keras.optimizer_v2 import rmsprop as rmsprop_module
from tensorflow.keras.optimizers import SGD, Adadelta, Adagrad, Adam, Adamax, Ftrl, Nadam, Optimizer, RMSprop
from tensorflow.keras.optimizers import Adam as KerasAdam
from tensorflow.keras.optimizers.experimental import Adam as NewAdam

from names import bound_names

BY_NAME = {"rmsprop": RMSprop, "sgd": SGD}
KERAS_RMSPROP = keras.optimizers.RMSprop
TF_RMSPROP = tf.keras.optimizers.RMSprop


class ScaledRMSprop(RMSprop):
    """A subclass defined after the IPU import."""


def make(optimizer_class=RMSprop, **kwargs):
    return optimizer_class(**kwargs)


def bound():
    return bound_names("late", globals())
