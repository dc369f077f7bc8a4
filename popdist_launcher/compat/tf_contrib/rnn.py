"""``tensorflow.contrib.rnn``' cells, which TensorFlow 1.15 also had as ``tf.nn.rnn_cell``."""
import tensorflow as tf

_cells = tf.compat.v1.nn.rnn_cell
BasicLSTMCell, BasicRNNCell, GRUCell, LSTMCell = (
    _cells.BasicLSTMCell, _cells.BasicRNNCell, _cells.GRUCell, _cells.LSTMCell)
LSTMStateTuple, MultiRNNCell, RNNCell = _cells.LSTMStateTuple, _cells.MultiRNNCell, _cells.RNNCell
DropoutWrapper, ResidualWrapper = _cells.DropoutWrapper, _cells.ResidualWrapper
