"""``ipu.dataset_benchmark``: Graphcore's input pipeline benchmark, measured on the host.

``dataset_benchmark`` / ``infeed_benchmark`` read ``elements_per_epochs`` elements of the dataset
``number_of_epochs`` times and return, as Graphcore's, a one-element string tensor holding JSON
``{"epochs": [{"elements_processed", "total_bytes_processed", "time_elapsed",
"elements_per_second", "bandwidth"}, ...]}`` (bandwidth in GB/s). There is no device buffer to
copy into here, so ``do_memcpy`` changes nothing, and the statistics are returned, not printed
(``print_stats`` is accepted; print the result to see them).
"""
from __future__ import annotations

import tensorflow as tf


def _element_bytes(*element) -> tf.Tensor:
    sizes = [tf.cast(tf.size(t), tf.int64) * t.dtype.size for t in tf.nest.flatten(element)]
    return tf.add_n(sizes) if sizes else tf.constant(0, tf.int64)


def _epoch(dataset: tf.data.Dataset, elements: int) -> tf.Tensor:
    """One epoch's statistics as a JSON object (a scalar string tensor)."""
    start = tf.timestamp()
    with tf.control_dependencies([start]):
        count, size = dataset.take(elements).reduce(
            (tf.constant(0, tf.int64), tf.constant(0, tf.int64)),
            lambda acc, *element: (acc[0] + 1, acc[1] + _element_bytes(*element)))
    with tf.control_dependencies([count, size]):
        elapsed = tf.maximum(tf.timestamp() - start, 1e-9)
    per_second = tf.cast(count, tf.float64) / elapsed
    bandwidth = tf.cast(size, tf.float64) / elapsed / 1e9
    fields = [("elements_processed", count), ("total_bytes_processed", size),
              ("time_elapsed", elapsed), ("elements_per_second", per_second),
              ("bandwidth", bandwidth)]
    parts = [tf.strings.join([f'"{name}": ', tf.strings.as_string(
        value, shortest=value.dtype.is_floating)]) for name, value in fields]
    return tf.strings.join(["{", tf.strings.reduce_join(tf.stack(parts), separator=", "), "}"])


def dataset_benchmark(dataset, number_of_epochs: int, elements_per_epochs: int,
                      print_stats: bool = True, apply_debug_options: bool = True,
                      do_memcpy: bool = True) -> tf.Tensor:
    """Statistics of reading ``dataset`` (see the module docstring)."""
    if number_of_epochs < 1:
        raise ValueError("Expected `number_of_epochs` to be at least 1.")
    if elements_per_epochs < 1:
        raise ValueError("Expected `elements_per_epochs` to be at least 1.")
    if not isinstance(dataset, tf.data.Dataset):
        raise TypeError(f"Expected `dataset` argument to be of type `tf.data.Dataset`, but got "
                        f"{dataset} instead.")
    for spec in tf.nest.flatten(dataset.element_spec):
        if 0 in (spec.shape.as_list() if spec.shape.rank is not None else []):
            raise tf.errors.InvalidArgumentError(
                None, None, f"Dataset contains a shape with a dimension of size 0: {spec.shape}.")
    epochs = []
    for _ in range(number_of_epochs):
        with tf.control_dependencies(epochs[-1:]):  # epochs one after another
            epochs.append(_epoch(dataset.repeat(), elements_per_epochs))
    report = tf.strings.join(['{"epochs": [', tf.strings.reduce_join(tf.stack(epochs),
                                                                       separator=", "), "]}"])
    return tf.reshape(report, [1])


def infeed_benchmark(infeed_queue, number_of_epochs: int, elements_per_epochs: int,
                     print_stats: bool = True, do_memcpy: bool = True) -> tf.Tensor:
    """``dataset_benchmark`` of the dataset an IPUInfeedQueue reads."""
    return dataset_benchmark(infeed_queue._dataset, number_of_epochs, elements_per_epochs,  # noqa: SLF001
                             print_stats=print_stats, do_memcpy=do_memcpy)
