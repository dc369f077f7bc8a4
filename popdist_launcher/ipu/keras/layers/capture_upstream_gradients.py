"""``keras.ipu.layers.CaptureUpstreamGradients`` / ``CaptureActivationGradients``: wrap a Keras
layer so the gradient arriving at its output (or at its activation's input) on the backward pass
reaches the optimizer's ``apply_gradients`` as ``captured_grads[tag]`` (the ALS optimizers)."""
from __future__ import annotations

import tensorflow as tf

from popdist_launcher.ipu.keras.optimizers import als_optimizer


def capture_upstream_gradients(x, tag: str):
    """``x`` unchanged; on the backward pass its gradient is recorded under ``tag``."""

    @tf.custom_gradient
    def identity(t):
        def grad(upstream):
            als_optimizer.capture(tag, upstream)
            return upstream
        return tf.identity(t), grad

    return identity(x)


class _GradientCaptureLayerBase(tf.keras.layers.Layer):
    def __init__(self, layer, tag: str) -> None:
        if not isinstance(layer, tf.keras.layers.Layer):
            raise ValueError(f"Expected an instance of a Keras Layer, got {type(layer).__name__}.")
        super().__init__(dtype=layer.dtype, name=tag)
        self._layer = layer
        self._tag = tag

    @property
    def tag(self) -> str:
        return self._tag

    @property
    def layer(self):
        return self._layer

    def build(self, input_shape):
        if not self._layer.built:
            self._layer.build(input_shape)
        super().build(input_shape)

    def _inner_call(self, inputs, *args, **kwargs):
        if "training" in kwargs and "training" not in self._layer._call_spec.arg_names:  # noqa: SLF001
            kwargs = {k: v for k, v in kwargs.items() if k != "training"}
        return self._layer.call(inputs, *args, **kwargs)

    def get_config(self):
        config = super().get_config()
        config.update(tag=self._tag, wrapped_layer_type=type(self._layer),
                      wrapped_layer_config=self._layer.get_config())
        return config

    @classmethod
    def from_config(cls, config):
        layer = config["wrapped_layer_type"].from_config(config["wrapped_layer_config"])
        return cls(layer, tag=config["tag"])


class CaptureUpstreamGradients(_GradientCaptureLayerBase):
    """Wraps a layer; the gradient w.r.t. its output is captured under ``tag`` (default: the
    layer's name + "_cug")."""

    def __init__(self, layer, tag=None) -> None:
        super().__init__(layer, tag if tag is not None else f"{layer.name}_cug")

    def call(self, inputs, *args, **kwargs):
        return capture_upstream_gradients(self._inner_call(inputs, *args, **kwargs), self._tag)


class CaptureActivationGradients(_GradientCaptureLayerBase):
    """Wraps a layer that has an activation function; the gradient w.r.t. the activation's
    input is captured under ``tag`` (default: the layer's name + "_cag")."""

    def __init__(self, layer, tag=None) -> None:
        if getattr(layer, "activation", None) is None:
            raise ValueError(f"Layer {layer.name} does not use an activation function, so "
                             f"CaptureActivationGradients cannot wrap it; use "
                             f"CaptureUpstreamGradients.")
        super().__init__(layer, tag if tag is not None else f"{layer.name}_cag")

    def call(self, inputs, *args, **kwargs):
        activation = self._layer.activation
        self._layer.activation = lambda x: activation(capture_upstream_gradients(x, self._tag))
        try:
            return self._inner_call(inputs, *args, **kwargs)
        finally:
            self._layer.activation = activation
