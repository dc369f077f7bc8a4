"""The compatibility layer: the import table and the one finder that applies it at interpreter
start (``startup``), and the modules its hooks and aliases run (Keras 2 per program, TensorFlow
2.6's Keras names, TensorFlow's removed modules, tf.estimator on TensorFlow 2.16+, contrib,
NumPy 1.x's names, Horovod elastic's and poprun-lite's switches). Importing it imports nothing:
the site hook imports ``compat.startup`` at every interpreter start."""
