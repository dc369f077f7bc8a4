"""A minimal ``hvd.elastic`` worker (Horovod's TensorFlow API, ObjectState) for the elastic driver
helper's tests: an allreduce per step, a commit every COMMIT steps.

environment: PROBE_DIR     where the worker writes done-<host>-<pid>.json at the end
             PROBE_TOTAL   steps to run (default 20)
             PROBE_FULL    the world size the job must have to finish (default 2): below it the
                           worker keeps stepping (and committing) until the world grows back
             PROBE_FAIL    HOST:STEP:CODE: the worker on HOST exits with CODE after STEP, once
                           per job (a marker file in PROBE_DIR)
             PROBE_HOLD    a file: while it exists the workers keep stepping
             PROBE_STALL   HOST: the worker on HOST sleeps before hvd.init() until stopped

The state's ``sizes`` holds the world size of every step of its lineage (rolled back with the
state), ``total`` the sum of the per-step allreduce of 1.0: at the end total == sum(sizes).
"""
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import horovod.tensorflow as hvd  # noqa: E402
import tensorflow as tf  # noqa: E402

COMMIT = 4
out_dir = os.environ["PROBE_DIR"]
total_steps = int(os.environ.get("PROBE_TOTAL", "20"))
full_size = int(os.environ.get("PROBE_FULL", "2"))
host = os.environ["HOROVOD_HOSTNAME"]
fail_host, fail_step, fail_code = (os.environ.get("PROBE_FAIL") or "::").split(":")
marker = os.path.join(out_dir, "failed-once")
hold = os.environ.get("PROBE_HOLD") or os.path.join(out_dir, "no-hold")

if os.environ.get("PROBE_STALL") == host:
    time.sleep(3600)  # e.g. a hung import: it never reaches Gloo's rendezvous
hvd.init()
state = hvd.elastic.ObjectState(hvd.broadcast_object, hvd.rank, step=0, total=0.0, sizes=[])
state.register_reset_callbacks([lambda: print(f"{host} reset rank {hvd.rank()} size {hvd.size()}",
                                              flush=True)])


@hvd.elastic.run
def train(state):
    while state.step < total_steps or hvd.size() < full_size or os.path.exists(hold):
        value = hvd.allreduce(tf.constant(1.0), op=hvd.Sum).numpy()
        state.total += float(value)
        state.sizes.append(hvd.size())
        state.step += 1
        print(f"{host} step {state.step} size {hvd.size()}", flush=True)
        if host == fail_host and str(state.step) == fail_step and not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(int(fail_code))
        if hvd.size() < full_size or os.path.exists(hold):
            time.sleep(0.05)  # waiting for the world or the test: leave the CPU to the others
        if state.step % COMMIT == 0:
            state.commit()


train(state)
with open(os.path.join(out_dir, f"done-{host}-{os.getpid()}.json"), "w") as f:
    json.dump({"host": host, "rank": hvd.rank(), "size": hvd.size(), "step": state.step,
               "total": state.total, "sizes": state.sizes}, f)
