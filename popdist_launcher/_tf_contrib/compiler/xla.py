"""``tensorflow.contrib.compiler.xla.compile(computation, inputs)``: TensorFlow 1.15 compiled the
function with XLA; here it is built in place as ``ipu.ipu_compiler.compile`` builds it (the same
contract: a list of the output tensors, a NoOp for none)."""
from popdist_launcher.ipu.ipu_compiler import compile  # noqa: F401,A004 (contrib's name)
