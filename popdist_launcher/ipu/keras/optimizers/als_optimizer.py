"""``keras.ipu.optimizers.ALSOptimizer``: automatic loss scaling. Gradients are taken of the loss
times a loss scaling factor (LSF), divided by it before the update, and the LSF moves by powers
of two from the share of float16 gradients that reach ``histogram_bin_edge``."""
from __future__ import annotations

import dataclasses
import inspect
import threading
from typing import Any, Callable, Dict, List, Optional

import tensorflow as tf

from popdist_launcher.ipu.gradient_accumulation import GradientAccumulationReductionMethod
from popdist_launcher.ipu.keras.optimizers.gradient_accumulation_optimizer import \
    GradientAccumulationOptimizer
from popdist_launcher.ipu.keras.optimizers.optimizer_v2_wrapper import OptimizerV2Wrapper
from popdist_launcher.ipu.ops import statistics_ops

# Gradients that CaptureUpstreamGradients / CaptureActivationGradients layers captured in the
# graph being built, by tag: the next apply_gradients of an ALS optimizer in that graph uses them.
_captured = threading.local()


def capture(tag: str, gradient: tf.Tensor) -> None:
    """Record the gradient a capturing layer saw on the backward pass of the current graph."""
    graph = tf.compat.v1.get_default_graph()
    by_graph = getattr(_captured, "by_graph", None)
    if by_graph is None or by_graph[0] is not graph:
        by_graph = _captured.by_graph = (graph, {})
    by_graph[1].setdefault(tag, gradient)  # replicas run one after another: the first's


def _take_captured() -> Dict[str, tf.Tensor]:
    by_graph = getattr(_captured, "by_graph", None)
    if by_graph is None or by_graph[0] is not tf.compat.v1.get_default_graph():
        return {}
    _captured.by_graph = None
    return by_graph[1]


def _is_power_of_two(x) -> bool:
    return x > 0 and float(x).is_integer() and (int(x) & (int(x) - 1)) == 0


@dataclasses.dataclass
class ALSDefaults:
    """The default arguments of the ALS optimizers."""
    initial_loss_scaling_factor = 1
    update_frequency = 8
    increase_factor = 2
    max_loss_scaling_factor = 32768
    accumulate_statistics_over_update_period = True
    ratio_threshold = 10e-6
    captured_grads_only = False
    lpf_alpha = 0.0
    histogram_bin_edge = 2**13


class ALSOptimizer(OptimizerV2Wrapper):
    """Automatic loss scaling around a Keras optimizer.

    Gradients are computed of ``loss * LSF`` and divided by the LSF before ``opt`` applies
    them, so in float32 (LSF a power of two) the weights follow ``opt`` exactly. Each
    ``apply_gradients`` counts the float16 gradients (and captured gradients) in a two-bin
    histogram, below / from ``histogram_bin_edge`` in magnitude (every call, or only on update
    calls when ``accumulate_statistics_over_update_period`` is False). The LSF is updated on
    the call that finds ``update_counter`` at a nonzero multiple of ``update_frequency``: divided
    by ``increase_factor`` when the overflowing share exceeds ``ratio_threshold``, else
    multiplied by it (an empty histogram, as with float32 gradients only, counts as no
    overflow), kept when the result is not finite, not below ``max_loss_scaling_factor``, or
    below 1; then the histogram and the counter restart. ``lpf_alpha`` low-pass filters the
    histogram between updates.
    """

    def __init__(self, opt, initial_loss_scaling_factor=ALSDefaults.initial_loss_scaling_factor,
                 update_frequency=ALSDefaults.update_frequency,
                 increase_factor=ALSDefaults.increase_factor,
                 max_loss_scaling_factor=ALSDefaults.max_loss_scaling_factor,
                 accumulate_statistics_over_update_period=ALSDefaults.
                 accumulate_statistics_over_update_period,
                 ratio_threshold=ALSDefaults.ratio_threshold,
                 captured_grads_only=ALSDefaults.captured_grads_only,
                 lpf_alpha=ALSDefaults.lpf_alpha,
                 histogram_bin_edge=ALSDefaults.histogram_bin_edge,
                 name: str = "ALSOptimizer") -> None:
        super().__init__(opt, name=name)
        if isinstance(update_frequency, bool) or not isinstance(update_frequency, int) or \
                update_frequency <= 0:
            raise ValueError(f"update_frequency must be a positive int, got {update_frequency!r}.")
        for what, value in (("increase_factor", increase_factor),
                            ("initial_loss_scaling_factor", initial_loss_scaling_factor),
                            ("max_loss_scaling_factor", max_loss_scaling_factor)):
            if not _is_power_of_two(value):
                raise ValueError(f"{what} must be a power of two, got {value!r}.")
        if initial_loss_scaling_factor * increase_factor >= max_loss_scaling_factor:
            raise ValueError("initial_loss_scaling_factor x increase_factor must be less than "
                             "max_loss_scaling_factor.")
        if not 0.0 < ratio_threshold < 1.0:
            raise ValueError(f"ratio_threshold must be greater than zero and less than one, got "
                             f"{ratio_threshold!r}.")
        self._settings = dict(
            initial_loss_scaling_factor=initial_loss_scaling_factor,
            update_frequency=update_frequency, increase_factor=increase_factor,
            max_loss_scaling_factor=max_loss_scaling_factor,
            accumulate_statistics_over_update_period=bool(accumulate_statistics_over_update_period),
            ratio_threshold=ratio_threshold, captured_grads_only=bool(captured_grads_only),
            lpf_alpha=float(lpf_alpha), histogram_bin_edge=histogram_bin_edge)
        # Each replica keeps its own state (updated without cross-replica calls); read from
        # outside the replicas, it is the first replica's.
        local = dict(synchronization=tf.VariableSynchronization.ON_READ,
                     aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        self._hist = self.add_weight("gradient_histogram", (2,), tf.float32, "zeros", **local)
        self._n = self.add_weight("lsf_update_counter", (), tf.int32, "zeros", **local)
        lsf = tf.keras.initializers.Constant(float(initial_loss_scaling_factor))
        self._lsf = self.add_weight("loss_scaling_factor", (), tf.float32, lsf, **local)
        self._prev_lsf = self.add_weight("prev_loss_scaling_factor", (), tf.float32, lsf, **local)

    # -- settings, read only as in Graphcore's -----------------------------------------------
    def _setting(name: str) -> property:  # noqa: N805 (a helper of the class body)
        return property(lambda self: self._settings[name], doc=f"The optimizer's {name}.")

    initial_loss_scaling_factor = _setting("initial_loss_scaling_factor")
    update_frequency = _setting("update_frequency")
    increase_factor = _setting("increase_factor")
    max_loss_scaling_factor = _setting("max_loss_scaling_factor")
    accumulate_statistics_over_update_period = _setting("accumulate_statistics_over_update_period")
    ratio_threshold = _setting("ratio_threshold")
    captured_grads_only = _setting("captured_grads_only")
    lpf_alpha = _setting("lpf_alpha")
    histogram_bin_edge = _setting("histogram_bin_edge")
    del _setting

    @property
    def decrease_factor(self) -> float:
        return 1.0 / self.increase_factor

    @property
    def supports_captured_grads(self) -> bool:
        return True

    @property
    def loss_scaling_factor(self) -> tf.Tensor:
        return tf.convert_to_tensor(self._lsf)

    @property
    def previous_loss_scaling_factor(self) -> tf.Tensor:
        return tf.convert_to_tensor(self._prev_lsf)

    @property
    def update_counter(self) -> tf.Tensor:
        return tf.convert_to_tensor(self._n)

    @property
    def histogram(self) -> tf.Tensor:
        return tf.convert_to_tensor(self._hist)

    @property
    def normalized_histogram(self) -> tf.Tensor:
        return statistics_ops.histogram_normalize(self.histogram)

    @property
    def iterations(self):
        """The wrapped optimizer's update count."""
        return self._opt.iterations

    @iterations.setter
    def iterations(self, variable):
        self._opt.iterations = variable

    # -- the algorithm ---------------------------------------------------------------------
    def get_scaled_loss(self, loss):
        """``loss`` times the current loss scaling factor."""
        loss = tf.convert_to_tensor(loss)
        return tf.cast(self._lsf, loss.dtype) * loss

    def _loss_for_gradients(self, loss):
        return self.get_scaled_loss(loss)

    def _counted(self, hist, grad):
        """``hist`` plus the float16 ``grad``'s values below / from the bin edge."""
        if grad is None or tf.as_dtype(grad.dtype) != tf.float16:
            return hist
        grad = tf.convert_to_tensor(grad)
        return statistics_ops.histogram_update(
            hist, tf.reshape(tf.cast(grad, tf.float32), [-1]),
            [float(self.histogram_bin_edge)], absolute_of_input=True)

    def _update_state(self, grads, captured_grads=None) -> None:
        """Add ``grads`` (and captured gradients) to the statistics; update the LSF when due."""
        s = self._settings
        n, lsf, prev_lsf = self._n.read_value(), self._lsf.read_value(), self._prev_lsf.read_value()
        due = tf.logical_or(tf.equal(s["update_frequency"], 1),
                            tf.logical_and(n > 0, tf.equal(n % s["update_frequency"], 0)))
        collect = tf.logical_or(s["accumulate_statistics_over_update_period"], due)
        alpha = s["lpf_alpha"]
        hist = self._hist.read_value()
        for grad in grads:  # each gradient is one filtered histogram update, as Graphcore's
            if not s["captured_grads_only"]:
                counted = tf.cond(collect, lambda g=grad, h=hist: self._counted(h, g),
                                  lambda h=hist: h)
                hist = alpha * hist + (1.0 - alpha) * counted
        for grad in tf.nest.flatten(captured_grads or {}):
            hist = tf.cond(collect, lambda g=grad, h=hist: self._counted(h, g), lambda h=hist: h)

        def updated_lsf():
            ratio = hist[1] / tf.reduce_sum(hist)  # NaN for an empty histogram: no overflow
            new = tf.where(ratio > s["ratio_threshold"], lsf / s["increase_factor"],
                           lsf * s["increase_factor"])
            keep = tf.logical_or(tf.logical_not(tf.math.is_finite(new)),
                                 tf.logical_or(new >= s["max_loss_scaling_factor"], new < 1.0))
            return tf.where(keep, lsf, new)

        new_lsf = tf.cond(due, updated_lsf, lambda: lsf)
        self._prev_lsf.assign(tf.where(tf.equal(new_lsf, lsf), prev_lsf, lsf))
        self._lsf.assign(new_lsf)
        self._hist.assign(tf.where(due, tf.zeros_like(hist), hist))
        self._n.assign(tf.where(due, 0, n + 1))

    def _unscaled(self, grads) -> List[Any]:
        lsf = self._lsf.read_value()
        return [None if g is None else tf.convert_to_tensor(g) / tf.cast(lsf, g.dtype)
                for g in grads]

    def _accumulation_micro_batch(self, grads):
        """The unscaled ``grads`` of one micro-batch, its statistics recorded and the LSF
        updated (Keras gradient accumulation calls this once per micro-batch, as Graphcore's
        ALS gradient accumulation updates the LSF on every micro-batch)."""
        unscaled = self._unscaled(grads)
        with tf.control_dependencies([u for u in unscaled if u is not None]):
            self._update_state([g for g in grads if g is not None], _take_captured())
        return unscaled

    def _accumulation_apply(self, grads_and_vars):
        """Apply accumulated, already unscaled gradients with the wrapped optimizer."""
        return self._inner_apply(grads_and_vars)

    def apply_gradients(self, grads_and_vars, captured_grads=None, global_step=None, name=None,
                        experimental_aggregate_gradients: bool = True):
        """Record the scaled gradients' statistics, update the LSF when due and apply the
        unscaled gradients with the wrapped optimizer."""
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        if captured_grads is None:
            captured_grads = _take_captured()
        grads = self._unscaled([g for g, _ in pairs])
        with tf.control_dependencies(grads):
            self._update_state([g for g, _ in pairs], captured_grads)
        return self._inner_apply(zip(grads, [v for _, v in pairs]), name)

    def reset(self) -> None:
        """Restart loss scaling: empty histogram, counter 0, the initial LSF."""
        self._hist.assign(tf.zeros_like(self._hist))
        self._n.assign(0)
        self._lsf.assign(float(self.initial_loss_scaling_factor))

    def get_name(self) -> str:
        return self._name

    def get_config(self) -> Dict[str, Any]:
        config = super().get_config()
        config.update(self._settings)
        return config


class ALSOptimizerAround(ALSOptimizer):
    """Base of ALSOptimizerSGD, Adam and RMSProp: an ALSOptimizer that makes its wrapped Keras
    optimizer, ``INNER_OPTIMIZER``, from its own first arguments (``INNER_DEFAULTS``: their
    names and defaults, in order), and is rebuilt from its configuration through them. A
    subclass names the two; its constructor is made from them, with the signature
    ``(<INNER_DEFAULTS>, <ALSOptimizer's arguments after opt>, name=<the class's name>)``."""

    INNER_OPTIMIZER: Optional[type] = None
    INNER_DEFAULTS: Dict[str, Any] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "INNER_OPTIMIZER" in vars(cls) and "__init__" not in vars(cls):
            cls.__init__ = _constructor_around(cls)

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        inner = config.pop("inner_optimizer_config")
        config.pop("inner_optimizer_type", None)
        return cls(**{k: inner[k] for k in cls.INNER_DEFAULTS if k in inner}, **config)


def _constructor_around(cls: type) -> Callable[..., None]:
    """``cls.__init__``: its arguments bound to ``cls``'s signature (positional and keyword calls
    work as with a written-out constructor; a wrong call is a TypeError naming the class), the
    wrapped optimizer made from the first ones, the rest handed to ALSOptimizer."""
    own = inspect.signature(ALSOptimizer.__init__)
    self_parameter, _opt, *als = own.parameters.values()
    inner = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default)
             for name, default in cls.INNER_DEFAULTS.items()]
    als = [p.replace(default=cls.__name__) if p.name == "name" else p for p in als]
    signature = own.replace(parameters=[self_parameter, *inner, *als])

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # noqa: N807
        try:
            bound = signature.bind(self, *args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{cls.__name__}(): {exc}") from None
        bound.apply_defaults()
        values = dict(bound.arguments)
        del values[self_parameter.name]
        wrapped = cls.INNER_OPTIMIZER(**{name: values.pop(name) for name in cls.INNER_DEFAULTS})
        super(cls, self).__init__(wrapped, **values)

    __init__.__signature__ = signature
    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    __init__.__module__ = cls.__module__
    return __init__


class ALSGradientAccumulationOptimizer(GradientAccumulationOptimizer):
    """Gradient accumulation for an ``ALSOptimizer``: every ``apply_gradients`` call (one per
    micro-batch) records the statistics and updates the LSF as the ALSOptimizer does, and
    accumulates the unscaled gradients; the ALSOptimizer's wrapped optimizer applies them every
    ``num_mini_batches`` calls. The LSF properties are those of the ALSOptimizer."""

    def __init__(self, als_optimizer, num_mini_batches: int, offload_weight_update_variables=None,
                 replicated_optimizer_state_sharding: bool = False, dtype=None,
                 reduction_method=GradientAccumulationReductionMethod.SUM,
                 name: str = "ALSGradientAccumulationOptimizer") -> None:
        if not isinstance(als_optimizer, ALSOptimizer):
            raise ValueError("ALSGradientAccumulationOptimizer can only be used with instances "
                             "of ALSOptimizer.")
        super().__init__(als_optimizer, num_mini_batches, offload_weight_update_variables,
                         replicated_optimizer_state_sharding, dtype, reduction_method, name)

    @property
    def als_optimizer(self) -> ALSOptimizer:
        return self._opt

    def _loss_for_gradients(self, loss):
        return self._opt.get_scaled_loss(loss)

    def get_scaled_loss(self, loss):
        return self._opt.get_scaled_loss(loss)

    def _inner_apply(self, grads_and_vars, name=None):
        return self._opt._accumulation_apply(grads_and_vars)  # noqa: SLF001

    def apply_gradients(self, grads_and_vars, captured_grads=None, name=None,
                        experimental_aggregate_gradients: bool = True):
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        als = self._opt
        if captured_grads is None:
            captured_grads = _take_captured()
        grads = als._unscaled([g for g, _ in pairs])  # noqa: SLF001
        with tf.control_dependencies(grads):
            als._update_state([g for g, _ in pairs], captured_grads)  # noqa: SLF001
        return super().apply_gradients(zip(grads, [v for _, v in pairs]), name=name)

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        if config.get("inner_optimizer_type") is not ALSOptimizer:
            raise ValueError("ALSGradientAccumulationOptimizer.from_config needs a configuration "
                             "whose inner_optimizer_type is ALSOptimizer.")
        inner = ALSOptimizer.from_config(config.pop("inner_optimizer_config"))
        config.pop("inner_optimizer_type")
        return cls(inner, **config)


def _delegate_to_als(name: str) -> property:
    return property(lambda self: getattr(self._opt, name), doc=f"The ALSOptimizer's {name}.")


for _name in ("histogram", "normalized_histogram", "loss_scaling_factor",
              "previous_loss_scaling_factor", "update_counter", "update_frequency",
              "increase_factor", "decrease_factor", "initial_loss_scaling_factor",
              "max_loss_scaling_factor", "accumulate_statistics_over_update_period",
              "ratio_threshold", "supports_captured_grads", "captured_grads_only", "lpf_alpha",
              "histogram_bin_edge"):
    setattr(ALSGradientAccumulationOptimizer, _name, _delegate_to_als(_name))
del _name
