"""``keras.ipu.optimizers.optimizer_v2_wrapper``: the base of the IPU Keras optimizer wrappers,
a legacy Keras ``OptimizerV2`` that hands hyperparameters, slots and weights to the optimizer it
wraps (a legacy ``OptimizerV2`` as in Graphcore's Keras, or a Keras 2.11+ optimizer)."""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Tuple

import tensorflow as tf

from popdist_launcher.compat import keras2

OptimizerV2 = keras2.import_src("optimizers.legacy.optimizer_v2").OptimizerV2
# Keras 2.11+'s optimizer base, by its module (tf.keras.optimizers.experimental is gone where
# tf.keras is Keras 3, and tf.keras.optimizers.Optimizer is OptimizerV2 in IPU programs).
Optimizer = keras2.import_src("optimizers.optimizer").Optimizer
_HYPER_ALIASES = {"lr": "learning_rate"}


def _is_legacy(opt) -> bool:
    return isinstance(opt, OptimizerV2)


def check_optimizer(opt, what: str) -> None:
    """TypeError unless ``opt`` is a Keras optimizer (legacy ``OptimizerV2`` or Keras 2.11+)."""
    if not (_is_legacy(opt) or isinstance(opt, Optimizer)):
        raise TypeError(f"{what} wraps a Keras optimizer (keras.optimizer_v2 / "
                        f"tf.keras.optimizers.legacy, or tf.keras.optimizers.experimental), got "
                        f"{type(opt).__name__}.")


def _inner_property(name: str) -> property:
    """A property read from and written to the wrapped optimizer."""
    return property(lambda self: getattr(self._opt, name),
                    lambda self, value: setattr(self._opt, name, value))


class OptimizerV2Wrapper(OptimizerV2):
    """A Keras optimizer around ``opt``: ``learning_rate`` / ``lr`` and the other
    hyperparameters, slots, weights and clipping options are those of ``opt``; subclasses
    decide how gradients reach ``opt.apply_gradients``."""

    def __init__(self, opt, name: Optional[str] = None, **kwargs: Any) -> None:
        check_optimizer(opt, type(self).__name__)
        object.__setattr__(self, "_opt", opt)
        super().__init__(name=name or type(self).__name__, **kwargs)
        self._track_trackable(opt, "inner_optimizer")

    # -- hyperparameters of the wrapped optimizer -------------------------------------------
    def _delegated(self, name: str) -> bool:
        opt = self.__dict__.get("_opt")
        if opt is None or name.startswith("_"):
            return False
        if _is_legacy(opt):
            return name in opt._hyper  # noqa: SLF001
        return name == "learning_rate" or name in getattr(opt, "_hyper", {}) or (
            hasattr(opt, name) and not hasattr(OptimizerV2, name))

    def __getattr__(self, name: str):
        name = _HYPER_ALIASES.get(name, name)
        if self._delegated(name):
            return getattr(self._opt, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        name = _HYPER_ALIASES.get(name, name)
        if self._delegated(name) and name not in self.__dict__ and \
                not isinstance(getattr(type(self), name, None), property):
            setattr(self._opt, name, value)
        else:
            super().__setattr__(name, value)

    def __dir__(self) -> List[str]:
        names = set(super().__dir__())
        hyper = getattr(self._opt, "_hyper", {})
        names |= set(hyper)
        if "learning_rate" in hyper or not _is_legacy(self._opt):
            names |= {"learning_rate", "lr"}
        return sorted(names)

    # -- what the wrapped optimizer owns --------------------------------------------------
    def get_slot(self, var, slot_name):
        return self._opt.get_slot(var, slot_name)

    def get_slot_names(self):
        return self._opt.get_slot_names()

    def add_slot(self, var, slot_name, initializer="zeros", shape=None):
        return self._opt.add_slot(var, slot_name, initializer=initializer, shape=shape)

    def get_weights(self):
        return self._opt.get_weights()

    def set_weights(self, weights):
        return self._opt.set_weights(weights)

    def variables(self):
        return self.weights

    @property
    def weights(self):
        weights = self._opt.weights if _is_legacy(self._opt) else self._opt.variables
        return list(weights)

    @property
    def inner_optimizer(self):
        """The wrapped optimizer."""
        return self._opt

    clipnorm = _inner_property("clipnorm")
    global_clipnorm = _inner_property("global_clipnorm")
    clipvalue = _inner_property("clipvalue")

    # -- gradients --------------------------------------------------------------------------
    def _gradients(self, loss, var_list, grad_loss=None, tape=None) -> List[Tuple[Any, Any]]:
        """``(gradient, variable)`` pairs of ``loss`` (a tensor, or a callable with a tape)."""
        if not callable(loss) and tape is None:
            raise ValueError("`tape` is required when a `Tensor` loss is passed.")
        tape = tape if tape is not None else tf.GradientTape()
        if callable(loss):
            with tape:
                if not callable(var_list):
                    tape.watch(var_list)
                loss = loss()
        var_list = var_list() if callable(var_list) else var_list
        var_list = tf.nest.flatten(var_list)
        with tape:
            loss = self._loss_for_gradients(loss)
        grads = tape.gradient(loss, var_list, grad_loss)
        return list(zip(grads, var_list))

    def _loss_for_gradients(self, loss):
        """The loss whose gradients are taken (subclasses scale it)."""
        return loss

    def _compute_gradients(self, loss, var_list, grad_loss=None, tape=None):
        return self._gradients(loss, var_list, grad_loss, tape)

    def get_gradients(self, loss, params):
        """Gradients of ``loss`` w.r.t. ``params`` in a graph (a ``tf.function``), as
        ``OptimizerV2.get_gradients``."""
        if isinstance(self._opt, OptimizerV2Wrapper):  # it scales the loss itself
            return self._opt.get_gradients(loss, params)
        loss = self._loss_for_gradients(loss)
        if _is_legacy(self._opt):
            return self._opt.get_gradients(loss, params)
        return tf.gradients(loss, params)

    def minimize(self, loss, var_list, grad_loss=None, name=None, tape=None):
        grads_and_vars = self._compute_gradients(loss, var_list, grad_loss=grad_loss, tape=tape)
        return self.apply_gradients(grads_and_vars, name=name)

    def _inner_apply(self, grads_and_vars: Iterable, name: Optional[str] = None):
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        if _is_legacy(self._opt):
            return self._opt.apply_gradients(pairs, name=name)
        return self._opt.apply_gradients(pairs)

    # -- configuration ----------------------------------------------------------------------
    def get_config(self) -> Dict[str, Any]:
        return {"inner_optimizer_config": self._opt.get_config(),
                "inner_optimizer_type": type(self._opt), "name": self._name}

    @staticmethod
    def _inner_from_config(config: Dict[str, Any]):
        config = dict(config)
        if "inner_optimizer_config" not in config or "inner_optimizer_type" not in config:
            raise ValueError("The configuration of an IPU Keras optimizer wrapper needs "
                             "`inner_optimizer_config` and `inner_optimizer_type`.")
        inner = config.pop("inner_optimizer_type").from_config(config.pop("inner_optimizer_config"))
        return inner, config

    @classmethod
    def from_config(cls, config, custom_objects=None):
        inner, config = cls._inner_from_config(config)
        return cls(inner, **config)
