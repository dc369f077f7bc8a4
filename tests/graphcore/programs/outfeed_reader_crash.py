"""A program whose main thread raises while its own thread drains the outfeed, as Graphcore's
outfeed_example drains it: the reader waits for 100 losses, the compiled loop enqueues 3, then
the main thread fails. The process must end (the reader is woken with an error), not hang.
Writes OUT/reader-<instance>.txt with what the reader saw before it stopped.

usage: outfeed_reader_crash.py OUT_DIR
"""
import os
import sys
import threading

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import popdist  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python import ipu  # noqa: E402

outfeed = ipu.ipu_outfeed_queue.IPUOutfeedQueue()
seen = []


def reader():
    try:
        while len(seen) != 100:
            for loss in outfeed:
                seen.append(float(loss))
    except tf.errors.OutOfRangeError as exc:
        with open(os.path.join(sys.argv[1], f"reader-{popdist.getInstanceIndex()}.txt"), "w") as f:
            f.write(f"{seen}\n{exc.message}\n")
        raise


threading.Thread(target=reader).start()
strategy = ipu.ipu_strategy.IPUStrategy()
with strategy.scope():
    @tf.function(jit_compile=True)
    def loop(steps):
        for step in tf.range(steps):
            outfeed.enqueue(tf.cast(step, tf.float32))

    strategy.run(loop, args=(3,))
    raise RuntimeError("the training loop failed after 3 of 100 steps")
