"""The program's own module, imported before the IPU layer, with its imports sorted as usual:
Keras optimizer names and Keras 2.6 module paths bound before ``from tensorflow.python import ipu``."""
from keras.engine import data_adapter
from keras.optimizer_v2 import rmsprop as rmsprop_module
from tensorflow.keras.optimizers import SGD, RMSprop
from tensorflow.keras.optimizers import Adam as KerasAdam
from tensorflow.keras.optimizers.experimental import Adam as NewAdam


def optimizer():
    return RMSprop(lr=0.001, rho=0.9, epsilon=1e-08, decay=0.0)


def bound():
    """The names as this module holds them when the program runs."""
    return {"models.RMSprop": RMSprop, "models.SGD": SGD, "models.KerasAdam": KerasAdam,
            "models.rmsprop_module.RMSprop": rmsprop_module.RMSprop,
            "models.data_adapter.DataHandler": data_adapter.DataHandler,
            "models.NewAdam": NewAdam}
