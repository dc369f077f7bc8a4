"""``ipu.nn_ops``: Graphcore's neural-network ops with their standard definitions."""
from __future__ import annotations

import functools
from typing import Optional

import tensorflow as tf


def gelu(x, approximate: bool = True, name: Optional[str] = None):
    """Gaussian error linear unit; ``approximate`` selects the tanh approximation, as on IPUs."""
    with tf.name_scope(name or "gelu"):
        return tf.nn.gelu(x, approximate=approximate)


def hard_sigmoid(x, name: Optional[str] = None):
    """``max(0, min(1, 0.2 * x + 0.5))``."""
    with tf.name_scope(name or "hard_sigmoid"):
        return tf.clip_by_value(0.2 * x + 0.5, 0.0, 1.0)


def swish(x, name: Optional[str] = None):
    """``x * sigmoid(x)``."""
    with tf.name_scope(name or "swish"):
        return tf.nn.silu(x)


def softmax(x, stable: bool = False, name: Optional[str] = None):
    """Softmax over the last axis (TensorFlow's is always the numerically stable one)."""
    with tf.name_scope(name or "softmax"):
        return tf.nn.softmax(x, axis=-1)


def multi_conv(func=None, options=None):
    """Decorator that runs the convolutions of ``func`` in parallel on IPUs; here the function is
    called as it is (the same numbers)."""

    def decorated(inner):
        @functools.wraps(inner)
        def call(*args):
            if options is not None and not isinstance(options, dict):
                raise TypeError(f"multi_conv options must be a dict of Poplar options, got "
                                f"{type(options).__name__}.")
            return inner(*args)

        return call

    return decorated if func is None else decorated(func)


def sampled_softmax_loss(weights, biases, labels, inputs, num_sampled: int, num_classes: int,
                         num_true: int = 1, sampled_values=None,
                         name: str = "sampled_softmax_loss", seed=None):
    """TensorFlow's sampled softmax loss (accidental hits removed, as TensorFlow's default)."""
    return tf.nn.sampled_softmax_loss(weights, biases, labels, inputs, num_sampled, num_classes,
                                      num_true=num_true, sampled_values=sampled_values,
                                      seed=seed, name=name)


def nce_loss(weights, biases, labels, inputs, num_sampled: int, num_classes: int,
             num_true: int = 1, sampled_values=None, name: str = "nce_loss"):
    """TensorFlow's noise-contrastive estimation loss."""
    return tf.nn.nce_loss(weights, biases, labels, inputs, num_sampled, num_classes,
                          num_true=num_true, sampled_values=sampled_values, name=name)


def _ctc(labels, data, label_length, data_length, blank_index: int, out_dtype, name):
    data = tf.convert_to_tensor(data)
    out_dtype = tf.as_dtype(out_dtype) if out_dtype is not None else data.dtype
    if data.dtype == tf.float32 and out_dtype == tf.float16:
        raise ValueError("out_dtype cannot be float16 when dtype of logits is float32.")
    loss = tf.nn.ctc_loss(labels, tf.cast(data, tf.float32), label_length, data_length,
                          logits_time_major=True, blank_index=blank_index,
                          name=name or "ctc_loss")
    return tf.cast(loss, out_dtype)


def ctc_loss_v2(labels, logits, label_length, logit_length, blank_index: int, out_dtype=None,
                name: Optional[str] = None):
    """CTC loss per example of dense ``labels`` [batch, max_label_length] and time-major
    ``logits`` [max_time, batch, classes]."""
    return _ctc(labels, logits, label_length, logit_length, blank_index, out_dtype, name)


def ctc_loss_with_log_probs(labels, data, label_length, data_length, blank_index: int,
                            out_dtype=None, name: Optional[str] = None):
    """``ctc_loss_v2`` on log-probabilities (softmax of log-softmax is the softmax itself)."""
    return _ctc(labels, data, label_length, data_length, blank_index, out_dtype, name)


def _beam_search(scores, lengths, beam_width: int, top_paths: int, blank_index: int, name):
    """TensorFlow's beam search with the blank class moved last (TensorFlow's blank), returned
    as Graphcore returns it: negative log probabilities and lengths [batch, top_paths], labels
    [batch, top_paths, max_time] (0 past each path's length)."""
    scores = tf.convert_to_tensor(scores)
    classes = scores.shape[-1]
    blank = blank_index % classes
    order = [c for c in range(classes) if c != blank] + [blank]
    with tf.name_scope(name or "ctc_beam_search"):
        decoded, log_probabilities = tf.nn.ctc_beam_search_decoder(
            tf.gather(tf.cast(scores, tf.float32), order, axis=-1), tf.cast(lengths, tf.int32),
            beam_width=beam_width, top_paths=top_paths)
        max_time, batch = tf.shape(scores)[0], tf.shape(scores)[1]
        labels, label_lengths = [], []
        for path in decoded:
            dense = tf.sparse.to_dense(path, default_value=-1)
            dense = tf.pad(dense, [[0, 0], [0, max_time - tf.shape(dense)[1]]], constant_values=-1)
            label_lengths.append(tf.reduce_sum(tf.cast(dense >= 0, tf.int32), axis=1))
            original = tf.gather(tf.constant(order, tf.int64), tf.maximum(dense, 0))
            labels.append(tf.where(dense >= 0, original, 0))
        labels = tf.reshape(tf.stack(labels, axis=1), [batch, top_paths, max_time])
        return (tf.cast(-log_probabilities, scores.dtype), tf.stack(label_lengths, axis=1),
                tf.cast(labels, tf.int32))


def ctc_beam_search_decoder(logits, logits_lengths, beam_width: int = 100, top_paths: int = 1,
                            blank_index: int = -1, name: Optional[str] = None):
    """The ``top_paths`` most likely label sequences of time-major ``logits``
    [max_time, batch, classes]: (negative log probabilities, lengths, labels)."""
    return _beam_search(logits, logits_lengths, beam_width, top_paths, blank_index, name)


def ctc_beam_search_decoder_with_log_probs(log_probs, input_lengths, beam_width: int = 100,
                                           top_paths: int = 1, blank_index: int = -1,
                                           name: Optional[str] = None):
    """``ctc_beam_search_decoder`` on log-probabilities (their log-softmax is themselves)."""
    return _beam_search(log_probs, input_lengths, beam_width, top_paths, blank_index, name)
