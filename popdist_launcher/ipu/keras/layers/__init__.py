"""``keras.ipu.layers``: Graphcore's Keras layers that capture gradients for the optimizer."""
from popdist_launcher.ipu.keras.layers.capture_upstream_gradients import (  # noqa: F401
    CaptureActivationGradients, CaptureUpstreamGradients)
