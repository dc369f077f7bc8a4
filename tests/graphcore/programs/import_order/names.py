"""What the program's modules report: each binding's class, by the same keys in every module."""
NAMES = ("SGD", "Adadelta", "Adagrad", "Adam", "Adamax", "Ftrl", "Nadam", "Optimizer", "RMSprop")


def bound_names(module: str, names: dict) -> dict:
    """module.key -> class for the names a module bound (see models.py)."""
    found = {f"{module}.{name}": names[name] for name in NAMES}
    found.update({
        f"{module}.KerasAdam": names["KerasAdam"],
        f"{module}.NewAdam": names["NewAdam"],
        f"{module}.rmsprop_module.RMSprop": names["rmsprop_module"].RMSprop,
        f"{module}.data_adapter.DataHandler": names["data_adapter"].DataHandler,
        f"{module}.BY_NAME.rmsprop": names["BY_NAME"]["rmsprop"],
        f"{module}.BY_NAME.sgd": names["BY_NAME"]["sgd"],
        f"{module}.KERAS_RMSPROP": names["KERAS_RMSPROP"],
        f"{module}.TF_RMSPROP": names["TF_RMSPROP"],
        f"{module}.ScaledRMSprop.base": names["ScaledRMSprop"].__bases__[0],
        f"{module}.make.default": names["make"].__defaults__[0],
    })
    return found
