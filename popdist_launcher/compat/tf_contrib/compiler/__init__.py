"""``tensorflow.contrib.compiler``: ``xla``, whose ``compile(computation, inputs)`` TensorFlow 1.15
compiled with XLA; the import table answers ``tensorflow.contrib.compiler.xla`` with
``ipu.ipu_compiler``, which builds the function in place (the same contract: a list of the output
tensors, a NoOp for none)."""
