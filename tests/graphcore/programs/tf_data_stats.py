"""tf.data statistics as TF 1.15 / 2.x programs collect them (``StatsAggregator``,
``latency_stats``, ``bytes_produced_stats``, ``set_stats_aggregator``,
``Options().experimental_stats``): element ``i`` of the dataset holds ``i % 4 + 1`` float32
values. Writes what the aggregator reported, as the program reads it back from its summaries,
to OUT/tf-data-stats-<instance>.json.

usage: tf_data_stats.py OUT_DIR [tf1]
  eager (default): get_summary() of an aggregator; an aggregator made while a tf.summary writer
                   is the default writes to it (read back from the event file)
  tf1:             TF 1.15's pattern: get_summary() in the SUMMARIES collection, merge_all,
                   FileWriter, Session
"""
import glob
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402
from tensorflow.core.framework import summary_pb2  # noqa: E402
from tensorflow.core.util import event_pb2  # noqa: E402

import popdist  # noqa: E402

ELEMENTS = 12
out_dir = os.path.join(sys.argv[1], f"instance-{popdist.getInstanceIndex()}")
os.makedirs(out_dir, exist_ok=True)
mode = sys.argv[2] if len(sys.argv) > 2 else "eager"
if mode == "tf1":
    tf.compat.v1.disable_v2_behavior()


def dataset():
    ds = tf.data.Dataset.range(ELEMENTS).map(
        lambda i: tf.fill(tf.reshape(i % 4 + 1, [1]), tf.cast(i, tf.float32)))
    ds = ds.apply(tf.data.experimental.latency_stats("record_latency"))
    return ds.apply(tf.data.experimental.bytes_produced_stats("record_bytes"))


def histograms(summary: summary_pb2.Summary, into: dict) -> dict:
    for value in summary.value:
        if value.HasField("histo"):
            entry = into.setdefault(value.tag, {"num": 0.0, "sum": 0.0, "records": 0})
            entry["num"] += value.histo.num
            entry["sum"] += value.histo.sum
            entry["records"] += 1
    return into


def events(directory: str) -> list:
    found = []
    for path in sorted(glob.glob(os.path.join(directory, "events.out.tfevents.*"))):
        for record in tf.compat.v1.io.tf_record_iterator(path):
            event = event_pb2.Event.FromString(record)
            if event.HasField("summary"):
                found.append(event)
    return found


out = {"mode": mode, "elements": ELEMENTS}
if mode == "eager":
    aggregator = tf.data.experimental.StatsAggregator()
    options = tf.data.Options()
    options.experimental_stats.aggregator = aggregator
    options.experimental_stats.prefix = "train"
    values = [v.numpy().tolist() for v in dataset().with_options(options)]
    out["values"] = values
    out["get_summary"] = histograms(summary_pb2.Summary.FromString(
        aggregator.get_summary().numpy()), {})

    logdir = os.path.join(out_dir, "logs")
    writer = tf.summary.create_file_writer(logdir)
    with writer.as_default():
        written = tf.data.experimental.StatsAggregator()
    for _ in dataset().apply(tf.data.experimental.set_stats_aggregator(written, "pipeline")):
        pass
    writer.flush()
    written_events = events(logdir)  # as elements come: the histograms so far
    out["writer"] = {}
    for event in written_events:
        for tag, histogram in histograms(event.summary, {}).items():
            out["writer"][tag] = histogram  # the last event's: every element
else:
    aggregator = tf.data.experimental.StatsAggregator()
    options = tf.data.Options()
    options.experimental_stats.aggregator = aggregator
    ds = dataset().with_options(options)
    tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.SUMMARIES, aggregator.get_summary())
    iterator = tf.compat.v1.data.make_initializable_iterator(ds)
    element = iterator.get_next()
    merged = tf.compat.v1.summary.merge_all()
    logdir = os.path.join(out_dir, "logs")
    writer = tf.compat.v1.summary.FileWriter(logdir)
    values = []
    with tf.compat.v1.Session() as session:
        session.run(iterator.initializer)
        while True:
            try:
                values.append(session.run(element).tolist())
            except tf.errors.OutOfRangeError:
                break
        writer.add_summary(session.run(merged), len(values))
    writer.close()
    out["values"] = values
    out["file_writer"] = histograms(events(logdir)[-1].summary, {})
with open(os.path.join(sys.argv[1], f"tf-data-stats-{popdist.getInstanceIndex()}.json"), "w") as f:
    json.dump(out, f)
