"""``ipu.data``: Graphcore's dataset wrappers (``ipu.data.ops.dataset_ops``)."""
from popdist_launcher.ipu.data import ops  # noqa: F401
