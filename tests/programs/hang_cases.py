"""Horovod programs (TF 2, two or more ranks) with one rank doing something on request, for the
hang check's kinds: what must be cut and what must not.

usage: hang_cases.py CASE RANK [SECONDS]
Controls (must finish):
  report    RANK runs NumPy for SECONDS after step 4, its peers wait in the next allreduce
  download  RANK downloads for SECONDS (a slow local TCP server) before the first collective
  sleep     RANK sleeps SECONDS after step 4
  save      RANK writes files (pickle) for SECONDS after step 4
  import    RANK imports a package after step 4 (from a folder named site-packages) whose
            top-level code waits SECONDS on an event, as a library fetching data when imported
Hangs:
  generator a tf.function step fed by tf.data from_generator; RANK's generator blocks for ever
            before step 4
  fit       Keras fit + DistributedOptimizer fed by from_generator; RANK's blocks for ever
  renamed   a tf.function step whose allreduce RANK names differently from step 4
  pyfunc    RANK's step calls a tf.py_function that spins for ever at step 4
  alone     RANK finishes but a non-daemon thread keeps it alive; its peers exit 0
Each rank prints "step N rank R" and "done rank R weight W".
"""
import os
import socket
import sys
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
case, who = sys.argv[1], int(sys.argv[2])
seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
if case == "fit":
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
if case == "report":  # one core's work: a second BLAS thread only takes a core from the tests
    os.environ["OPENBLAS_NUM_THREADS"] = "1"  # beside this one (the check sees either)
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import horovod.tensorflow as hvd  # noqa: E402

STEPS = 8
hvd.init()
rank = hvd.rank()
mine = rank == who


def download(for_s):
    """Read from a local server that sends a little every 0.2 s for ``for_s`` seconds."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def serve():
        conn, _ = server.accept()
        end = time.monotonic() + for_s
        while time.monotonic() < end:
            conn.sendall(b"x" * 4096)
            time.sleep(0.2)
        conn.close()

    threading.Thread(target=serve, daemon=True).start()
    client = socket.create_connection(server.getsockname(), timeout=60)
    got = 0
    while True:
        chunk = client.recv(65536)
        if not chunk:
            return got
        got += len(chunk)


def phase(kind, for_s):
    end = time.monotonic() + for_s
    if kind == "report":
        total = 0.0
        while time.monotonic() < end:
            total += float(np.linalg.norm(np.random.rand(200, 200) @ np.random.rand(200, 200)))
    elif kind == "sleep":
        time.sleep(for_s)
    elif kind == "import":
        import tempfile
        folder = os.path.join(tempfile.mkdtemp(), "site-packages")
        os.makedirs(os.path.join(folder, "slow_import_pkg"))
        with open(os.path.join(folder, "slow_import_pkg", "__init__.py"), "w") as f:
            f.write(f"import threading\nthreading.Event().wait({for_s})\n")
        sys.path.insert(0, folder)
        import slow_import_pkg  # noqa: F401
    elif kind == "save":
        import pickle
        import tempfile
        with tempfile.TemporaryDirectory() as folder:
            n = 0
            while time.monotonic() < end:
                with open(os.path.join(folder, f"part{n % 4}.pkl"), "wb") as f:
                    pickle.dump(np.random.rand(256, 256), f)
                n += 1


def gen():
    for step in range(1, STEPS + 1):
        if step == 4 and mine and case in ("generator", "fit"):
            print(f"rank {rank} input blocks", flush=True)
            threading.Event().wait()
        yield np.array([float(rank + 1)]), np.array([1.0])


def spin(x):
    if mine and int(x) == 4:
        print(f"rank {rank} spins in a py_function", flush=True)
        while True:
            pass
    return x


if case == "fit":
    import horovod.tensorflow.keras as hvd_keras
    model = tf.keras.Sequential([tf.keras.Input((1,)),
                                 tf.keras.layers.Dense(1, use_bias=False,
                                                       kernel_initializer="ones")])
    opt = hvd_keras.DistributedOptimizer(tf.keras.optimizers.SGD(0.01))
    model.compile(optimizer=opt, loss="mse")
    data = tf.data.Dataset.from_generator(
        gen, output_signature=(tf.TensorSpec([1], tf.float64), tf.TensorSpec([1], tf.float64)))
    model.fit(data.batch(1), epochs=1, verbose=0,
              callbacks=[hvd_keras.callbacks.BroadcastGlobalVariablesCallback(0)])
    weight = float(model.get_weights()[0].ravel()[0])
    print(f"done rank {rank} weight {weight:.12f}", flush=True)
    sys.exit(0)

if case == "download" and mine:
    download(seconds)
weight = tf.Variable(1.0, dtype=tf.float64)
hvd.broadcast_variables([weight], root_rank=0)


@tf.function
def train_step(x, step):
    with tf.GradientTape() as tape:
        loss = tf.square(weight * x - 1.0)
    grad = tape.gradient(loss, [weight])[0]
    if case == "pyfunc":
        grad = tf.py_function(spin, [tf.cast(step, tf.float64)], tf.float64) * 0.0 + grad
    name = "other_grad" if case == "renamed" and mine and step >= 4 else "grad"
    grad = hvd.allreduce(grad, name=name) if case == "renamed" else hvd.allreduce(grad)
    weight.assign_sub(0.01 * grad)


if case in ("generator",):
    data = iter(tf.data.Dataset.from_generator(
        gen, output_signature=(tf.TensorSpec([1], tf.float64), tf.TensorSpec([1], tf.float64))))
for step in range(1, STEPS + 1):
    if step == 5 and mine and case in ("report", "sleep", "save", "import"):
        print(f"rank {rank} {case} for {seconds:g} s", flush=True)
        phase(case, seconds)
    if case == "generator":
        x = next(data)[0][0]
    else:
        x = tf.constant(float(rank + 1), tf.float64)
    if case == "renamed" and mine and step == 4:
        print(f"rank {rank} renames its allreduce", flush=True)
    train_step(x, step if case == "renamed" else tf.constant(step))  # a name per trace
    print(f"step {step} rank {rank}", flush=True)
print(f"done rank {rank} weight {weight.numpy():.12f}", flush=True)
if case == "alone" and mine:
    def heartbeat():
        while True:
            time.sleep(0.5)
    threading.Thread(target=heartbeat, name="heartbeat").start()
