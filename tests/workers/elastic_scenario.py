"""A Horovod elastic Keras-state worker that acts out a scenario: it trains EPOCHS epochs of
BATCHES steps (a commit after every step and at each epoch's end), fails on a schedule, and on
rank 0 logs one JSON line per finished epoch and waits for the host change the schedule expects.

usage: elastic_scenario.py LOG [--epochs N] [--batches N] [--epoch-wait S] [--hosts JSON]
                               [--failures JSON] [--fail-by exception|kill] [--notice-wait S]
                               [--sync-failures JSON] [--fail-at-start HOST] [--pid-dir DIR]
                               [--fail-before-init HOST] [--fail-at-import HOST]
  LOG         rank 0 appends {"epoch", "commits", "host", "start_rank", "rank", "size",
              "step_size", "rendezvous", "pid"} after each epoch (a discovery script may count
              its lines); "size" is the round's when the line is written, "step_size" the
              round's of this worker's last training step (a host change caught by the epoch's
              last commit writes the line in the new round, before any step in it)
  --hosts     [[epoch, [host:slots, ...]], ...]: the hosts the discovery script lists while
              LOG has `epoch` lines (null: every later epoch); when the next epoch's hosts differ,
              rank 0 waits up to --notice-wait s (default 5) for the driver's notice of the change
  --failures  {"epoch,batch": [start ranks]}: the workers whose rank at start (HOROVOD_RANK) is
              listed fail just before that step: by an exception, or by SIGKILL (--fail-by kill)
  --sync-failures {"n": [start ranks]}: the listed workers are killed (SIGKILL) as their n-th
              state sync begins, while the others are in its broadcast
  --fail-at-start  every worker on HOST raises as it begins to train (after hvd.init() and its
              first state sync)
  --fail-before-init  every worker on HOST exits with 3 after importing Horovod, before
              hvd.init() (a new host's workers never reach Gloo's rendezvous)
  --fail-at-import  every worker on HOST raises ImportError at once, as it starts
  --pid-dir   each worker writes its pid to DIR/<pid>

The state holds epoch, batch, commits and rendezvous (how many times training was entered, i.e.
the reset count plus one, as the state rank 0 last synced holds it).
"""
import argparse
import json
import importlib.util
import os
import signal
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("log")
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batches", type=int, default=5)
parser.add_argument("--epoch-wait", type=float, default=0.0)
parser.add_argument("--hosts", default="[]")
parser.add_argument("--failures", default="{}")
parser.add_argument("--fail-by", choices=("exception", "kill"), default="exception")
parser.add_argument("--notice-wait", type=float, default=5.0)
parser.add_argument("--sync-failures", default="{}")
parser.add_argument("--fail-at-start", default=None)
parser.add_argument("--fail-before-init", default=None)
parser.add_argument("--fail-at-import", default=None)
parser.add_argument("--pid-dir", default=None)
args = parser.parse_args()

schedule = json.loads(args.hosts)
hosts_at = {epoch: hosts for epoch, hosts in schedule if epoch is not None}
later_hosts = schedule[-1][1] if schedule else []
failures = {tuple(int(n) for n in key.split(",")): ranks
            for key, ranks in json.loads(args.failures).items()}
start_rank = int(os.environ["HOROVOD_RANK"])
host = os.environ["HOROVOD_HOSTNAME"]
sync_failures = {int(n): ranks for n, ranks in json.loads(args.sync_failures).items()}
if args.pid_dir:
    with open(os.path.join(args.pid_dir, str(os.getpid())), "w") as f:
        f.write(host)
if host == args.fail_at_import:
    raise ImportError(f"{host}: this host's environment is broken (a scheduled ImportError)")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
if importlib.util.find_spec("tf_keras"):  # TensorFlow 2.16+ (2.15 has Keras 2 only)
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # a Keras 2 program (its legacy optimizer)
import tensorflow as tf  # noqa: E402
import horovod.tensorflow as hvd  # noqa: E402

if host == args.fail_before_init:
    print(f"{host}: this host's workers exit before hvd.init()", flush=True)
    sys.exit(3)
hvd.init()
features = tf.reshape(tf.range(16, dtype=tf.float32), (8, 2)) / 16.0
labels = tf.reduce_sum(features, axis=1, keepdims=True)
model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
model.build((None, 2))
optimizer = tf.keras.optimizers.legacy.SGD(0.01)
# Every sync broadcasts the optimizer's variables: create them now (zero gradients change no
# weight), so that a worker joining later has the same ones as the others.
optimizer.apply_gradients([(tf.zeros_like(v), v) for v in model.trainable_variables])


@tf.function
def train_step():
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(features) - labels))
    tape = hvd.DistributedGradientTape(tape)
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                  model.trainable_variables))


def maybe_fail(epoch: int, batch: int) -> None:
    if start_rank in failures.get((epoch, batch), ()):
        if args.fail_by == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise RuntimeError(f"scheduled failure at epoch {epoch} batch {batch} (start rank "
                           f"{start_rank}, rank {hvd.rank()})")


def wait_for_notice(state) -> None:
    """Rank 0: the schedule changes the hosts after this epoch; the driver must say so."""
    deadline = time.monotonic() + args.notice_wait
    while state._host_messages.empty():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no host change notice within {args.notice_wait} s")
        time.sleep(0.05)


step_size = None  # hvd.size() at this worker's last training step


@hvd.elastic.run
def train(state):
    global step_size
    state.rendezvous += 1
    if host == args.fail_at_start:
        raise RuntimeError(f"{host}: this host's workers fail as they begin to train")
    while state.epoch < args.epochs:
        while state.batch < args.batches:
            maybe_fail(state.epoch, state.batch)
            train_step()
            step_size = hvd.size()
            state.batch += 1
            state.commits += 1
            state.commit()
        if hvd.rank() == 0:
            with open(args.log, "a") as log:
                log.write(json.dumps({
                    "epoch": state.epoch, "commits": state.commits, "host": host,
                    "start_rank": start_rank, "rank": hvd.rank(), "size": hvd.size(),
                    "step_size": step_size,
                    "rendezvous": state.rendezvous, "pid": os.getpid()}) + "\n")
            if hosts_at.get(state.epoch, later_hosts) != hosts_at.get(state.epoch + 1,
                                                                       later_hosts):
                wait_for_notice(state)
        if args.epoch_wait:
            time.sleep(args.epoch_wait)
        state.epoch += 1
        state.batch = 0
        state.commits += 1
        state.commit()


class ScenarioState(hvd.elastic.TensorFlowKerasState):
    syncs = 0

    def sync(self):
        self.syncs += 1
        if start_rank in sync_failures.get(self.syncs, ()):
            os.kill(os.getpid(), signal.SIGKILL)
        super().sync()


state = ScenarioState(model, optimizer, epoch=0, batch=0, commits=0, rendezvous=0)
train(state)
