"""``ipu.data.ops``: Graphcore's dataset wrapper ops."""
from popdist_launcher.ipu.data.ops import dataset_ops  # noqa: F401
