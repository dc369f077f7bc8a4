"""``tf.data`` names that TensorFlow 1.15 / 2.6 (and so Graphcore's SDKs) had and TensorFlow 2.15
removed, given back with their meaning on this machine (the site hook calls ``install`` once
TensorFlow has imported; a name that exists is never replaced).

Statistics are really collected: ``latency_stats`` and ``bytes_produced_stats`` add TensorFlow's
own (still compiled) statistics datasets, ``StatsAggregator`` is TensorFlow's aggregator resource
and ``set_stats_aggregator`` / ``Options.experimental_stats.aggregator`` attach it, so the
aggregator also records the per-transformation execution times that tf.data reports. Where they
go is where the program asks: ``aggregator.get_summary()`` is the serialized ``Summary`` of
everything aggregated so far (TF 1.15's way: add it to ``tf.summary.FileWriter`` or the
SUMMARIES collection); an aggregator made in eager mode while a ``tf.summary`` writer is the
default writes each statistic to that writer (TF 2.x's way).

The tf.data graph rewrites that TensorFlow 2.15 no longer has (``map_vectorization``,
``hoist_random_uniform``, ``filter_with_random_uniform_fusion``, ``reorder_data_discarding_ops``)
are accepted and change nothing (they never changed a dataset's elements); the
``experimental_optimization.autotune*`` settings are ``options.autotune``'s.
"""
from __future__ import annotations

import logging

log = logging.getLogger(__name__)

_REMOVED_REWRITES = ("map_vectorization", "hoist_random_uniform",
                     "filter_with_random_uniform_fusion", "reorder_data_discarding_ops")
# experimental_optimization.X (TF 1.15 / 2.6) -> options.autotune.Y (TF 2.15)
_AUTOTUNE = {"autotune": "enabled", "autotune_cpu_budget": "cpu_budget",
             "autotune_ram_budget": "ram_budget"}


def _classes():
    """The classes, made once TensorFlow is importable (this module imports nothing before)."""
    import tensorflow as tf
    from tensorflow.python.data.ops import dataset_ops
    from tensorflow.python.data.util import options as options_lib
    from tensorflow.python.ops import gen_experimental_dataset_ops as gen

    class _StatsDataset(dataset_ops.UnaryUnchangedStructureDataset):
        """One of TensorFlow's statistics datasets around ``input_dataset``."""

        def __init__(self, input_dataset, make_variant):
            self._input_dataset = input_dataset
            super().__init__(input_dataset, make_variant(input_dataset))

    class StatsAggregator:
        """Aggregates the statistics of the datasets it is attached to (with
        ``set_stats_aggregator`` or ``tf.data.Options().experimental_stats.aggregator``).

        ``get_summary()`` returns a string tensor: the serialized ``tf.compat.v1.Summary`` of
        the statistics aggregated so far (histograms of latencies and bytes, scalar counters),
        as TensorFlow 1.15's. Made in eager mode while a ``tf.summary`` writer is the default,
        it writes every statistic to that writer as it is recorded, as TensorFlow 2.x's did.
        """

        def __init__(self):
            writer = None
            if tf.executing_eagerly():
                from tensorflow.python.ops import summary_ops_v2
                writer = summary_ops_v2._summary_state.writer  # noqa: SLF001 (the default writer)
            if writer is not None and getattr(writer, "_resource", None) is not None:
                self._resource = gen.stats_aggregator_handle_v2()
                gen.stats_aggregator_set_summary_writer(self._resource, writer._resource)  # noqa: SLF001
                self._writes_to = writer
            else:
                self._resource = gen.stats_aggregator_handle()
                self._writes_to = None

        def get_summary(self):
            """The serialized ``Summary`` protocol buffer of the statistics so far (a scalar
            string tensor; empty when this aggregator writes to a summary writer instead)."""
            return gen.stats_aggregator_summary(self._resource)

    class StatsOptions(options_lib.OptionsBase):
        """``tf.data.Options().experimental_stats``: ``aggregator`` attaches a StatsAggregator to
        the dataset ``with_options`` returns; ``prefix`` / ``counter_prefix`` prefix the
        statistics' tags; ``latency_all_edges`` also records the latency of that dataset's
        elements (TensorFlow 2.15 lost the rewrite that put one after every transformation; the
        aggregator still gets every transformation's execution time)."""

        aggregator = options_lib.create_option(
            name="aggregator", ty=StatsAggregator,
            docstring="The StatsAggregator that collects the dataset's statistics.")
        prefix = options_lib.create_option(
            name="prefix", ty=str, docstring="Prefix of the statistics' tags.",
            default_factory=lambda: "")
        counter_prefix = options_lib.create_option(
            name="counter_prefix", ty=str, docstring="Prefix of the counters' names.",
            default_factory=lambda: "")
        latency_all_edges = options_lib.create_option(
            name="latency_all_edges", ty=bool,
            docstring="Also record the latency of the dataset's elements.")

    class MapVectorizationOptions(options_lib.OptionsBase):
        """TF 2.6's map vectorization settings: accepted; TensorFlow 2.15 has no such rewrite
        (it never changed a dataset's elements)."""

        enabled = options_lib.create_option(name="enabled", ty=bool,
                                            docstring="Whether to vectorize map transformations.")
        use_choose_fastest = options_lib.create_option(
            name="use_choose_fastest", ty=bool,
            docstring="Whether to pick the faster of the vectorized and original pipeline.")

    def latency_stats(tag):
        """Record each element's production latency under ``tag`` (a transformation for
        ``Dataset.apply``)."""
        def apply(dataset):
            return _StatsDataset(dataset, lambda d: gen.latency_stats_dataset(
                d._variant_tensor, tf.constant(tag, tf.string), **d._flat_structure))  # noqa: SLF001
        return apply

    def bytes_produced_stats(tag):
        """Record each element's size in bytes under ``tag`` (a transformation)."""
        def apply(dataset):
            return _StatsDataset(dataset, lambda d: gen.bytes_produced_stats_dataset(
                d._variant_tensor, tf.constant(tag, tf.string), **d._flat_structure))  # noqa: SLF001
        return apply

    def set_stats_aggregator(stats_aggregator, prefix="", counter_prefix=""):
        """Attach ``stats_aggregator`` to the dataset and everything it reads (a transformation)."""
        if not isinstance(stats_aggregator, StatsAggregator):
            raise TypeError(f"set_stats_aggregator needs a tf.data.experimental.StatsAggregator, "
                            f"got {type(stats_aggregator).__name__}.")

        def apply(dataset):
            return _StatsDataset(dataset, lambda d: gen.set_stats_aggregator_dataset(
                d._variant_tensor, stats_aggregator._resource,  # noqa: SLF001
                tf.constant(prefix, tf.string), tf.constant(counter_prefix, tf.string),
                **d._flat_structure))  # noqa: SLF001
        return apply

    def filter_for_shard(num_shards, shard_index):
        """TF 1.15's ``filter_for_shard``: keep every ``num_shards``-th element from
        ``shard_index`` on (``Dataset.shard``)."""
        return lambda dataset: dataset.shard(num_shards, shard_index)

    return dict(StatsAggregator=StatsAggregator, StatsOptions=StatsOptions,
                MapVectorizationOptions=MapVectorizationOptions, latency_stats=latency_stats,
                bytes_produced_stats=bytes_produced_stats,
                set_stats_aggregator=set_stats_aggregator, filter_for_shard=filter_for_shard)


def _with_options(original, names):
    """``Dataset.with_options`` that honours ``experimental_stats`` and the removed
    ``experimental_optimization`` settings before TensorFlow's own options."""
    import functools

    @functools.wraps(original)
    def with_options(self, options, name=None):
        stats = options._options.get("experimental_stats")  # noqa: SLF001 (set or not)
        optimization = options._options.get("experimental_optimization")  # noqa: SLF001
        if optimization is not None:
            for old, new in _AUTOTUNE.items():
                value = optimization._options.get(old)  # noqa: SLF001
                if value is not None:
                    setattr(options.autotune, new, value)
            used = [n for n in _REMOVED_REWRITES + ("autotune_buffers",)
                    if optimization._options.get(n) is not None]  # noqa: SLF001
            if used:
                log.info("tf.data: experimental_optimization.%s changes nothing in TensorFlow "
                         "2.15 (the rewrite no longer exists; the elements are the same).",
                         ", ".join(used))
        dataset = original(self, options, name=name)
        if stats is not None and stats.aggregator is not None:
            if stats.latency_all_edges:
                dataset = names["latency_stats"](f"{stats.prefix or 'dataset'}::latency")(dataset)
            dataset = names["set_stats_aggregator"](stats.aggregator, stats.prefix,
                                                    stats.counter_prefix)(dataset)
        return dataset

    with_options._tf_data_compat = True
    return with_options


def install(tf_module=None) -> None:
    """Give back the removed ``tf.data`` names (once; the site hook runs this when TensorFlow
    has imported)."""
    import tensorflow as tf
    from tensorflow.python.data.ops import dataset_ops
    from tensorflow.python.data.util import options as options_lib

    if getattr(dataset_ops.DatasetV2.with_options, "_tf_data_compat", False):
        return
    names = _classes()
    for module in (tf.data.experimental, tf.compat.v1.data.experimental):
        for name, value in names.items():
            if not hasattr(module, name):
                setattr(module, name, value)
    options_class = tf.data.Options
    if not hasattr(options_class, "experimental_stats"):
        options_class.experimental_stats = options_lib.create_option(
            name="experimental_stats", ty=names["StatsOptions"],
            docstring="The statistics options (tf.data.experimental.StatsOptions).",
            default_factory=names["StatsOptions"])
    optimization_class = type(tf.data.Options().experimental_optimization)
    if not hasattr(optimization_class, "map_vectorization"):
        optimization_class.map_vectorization = options_lib.create_option(
            name="map_vectorization", ty=names["MapVectorizationOptions"],
            docstring="Accepted; no such rewrite in TensorFlow 2.15.",
            default_factory=names["MapVectorizationOptions"])
    for name in _REMOVED_REWRITES[1:] + ("autotune", "autotune_buffers"):
        if not hasattr(optimization_class, name):
            setattr(optimization_class, name, options_lib.create_option(
                name=name, ty=bool,
                docstring="TF 2.6's setting (see popdist_launcher.compat.tf_data_compat)."))
    for name, ty in (("autotune_cpu_budget", int), ("autotune_ram_budget", int)):
        if not hasattr(optimization_class, name):
            setattr(optimization_class, name, options_lib.create_option(
                name=name, ty=ty, docstring="options.autotune's budget (TF 2.6's name)."))
    dataset_ops.DatasetV2.with_options = _with_options(dataset_ops.DatasetV2.with_options, names)
