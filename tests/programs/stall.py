"""Instance 0 enters an allreduce that instance 1 never joins (it is busy_elsewhere): the
collectives' stall watchdog fires after 4 s."""
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402

from popdist_launcher import collectives  # noqa: E402

collectives.init(stall_timeout=4)


def busy_elsewhere():
    time.sleep(120)


if os.environ["POPDIST_INSTANCE_INDEX"] == "0":
    collectives.allreduce(tf.constant([1.0]))
else:
    busy_elsewhere()
