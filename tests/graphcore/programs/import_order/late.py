"""A module imported after the IPU layer binds the same names."""
from keras.engine import data_adapter
from keras.optimizer_v2 import rmsprop as rmsprop_module
from tensorflow.keras.optimizers import SGD, RMSprop
from tensorflow.keras.optimizers import Adam as KerasAdam
from tensorflow.keras.optimizers.experimental import Adam as NewAdam


def bound():
    """The names as this module holds them when the program runs."""
    return {"late.RMSprop": RMSprop, "late.SGD": SGD, "late.KerasAdam": KerasAdam,
            "late.rmsprop_module.RMSprop": rmsprop_module.RMSprop,
            "late.data_adapter.DataHandler": data_adapter.DataHandler,
            "late.NewAdam": NewAdam}
