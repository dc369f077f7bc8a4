"""One instance of one allreduce peer, started by benchmarks/allreduce.py through a launcher.

Not meant to be run by hand (except ``--print-resnet50-shapes``). Usage::

    _allreduce_worker.py PEER OUT_JSON ITEM [ITEM ...]

PEER is one of

* ``ours``          popdist_launcher.collectives (Horovod, configured by poprun-lite);
* ``horovod-gloo``  plain horovod.tensorflow, under ``horovodrun --gloo``;
* ``horovod-mpi``   plain horovod.tensorflow, under ``mpirun`` (MPI controller and operations);
* ``mpi4py``        ``comm.Allreduce`` on numpy buffers, under ``mpirun``;
* ``mwms``          TensorFlow's own collective all-reduce (MultiWorkerMirroredStrategy, from
                    TF_CONFIG), under poprun-lite.

Each ITEM is ``BYTES:ITERS:WARMUP`` (allreduce, op Sum, of one float32 tensor of BYTES bytes) or
``resnet50:ITERS:WARMUP`` (one grouped allreduce, op Sum, of the 214 float32 gradient tensors of
ResNet-50 with their real shapes). Every input element is 1.0, so every output element must equal
the number of instances; the last result of each item is checked.

For each item: WARMUP uncounted calls, a barrier, then ITERS calls, each timed on its own with
``time.perf_counter`` on rank 0 (a call returns only once its result is complete: eager
TensorFlow and a tf.function call are synchronous on CPU, mpi4py's Allreduce is blocking).
Rank 0 writes OUT_JSON; every rank then leaves through the peer's own shutdown.
"""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Callable, Dict, List, NamedTuple, Sequence, Tuple

import numpy as np

PEERS = ("ours", "horovod-gloo", "horovod-mpi", "mpi4py", "mwms")
RESNET50 = "resnet50"
# The barrier's own name keeps it out of the way of the measured (unnamed, eager) Horovod ops.
BARRIER = "allreduce_bench_barrier"

# Shapes of tf.keras.applications.ResNet50(weights=None).trainable_variables, in model order,
# generated once with ``_allreduce_worker.py --print-resnet50-shapes`` (TensorFlow 2.15.1).
RESNET50_SHAPES: Tuple[Tuple[int, ...], ...] = (
    (7,7,3,64), (64,), (64,), (64,), (1,1,64,64), (64,), (64,), (64,), (3,3,64,64), (64,),
    (64,), (64,), (1,1,64,256), (256,), (1,1,64,256), (256,), (256,), (256,), (256,), (256,),
    (1,1,256,64), (64,), (64,), (64,), (3,3,64,64), (64,), (64,), (64,), (1,1,64,256), (256,),
    (256,), (256,), (1,1,256,64), (64,), (64,), (64,), (3,3,64,64), (64,), (64,), (64,),
    (1,1,64,256), (256,), (256,), (256,), (1,1,256,128), (128,), (128,), (128,),
    (3,3,128,128), (128,), (128,), (128,), (1,1,256,512), (512,), (1,1,128,512), (512,),
    (512,), (512,), (512,), (512,), (1,1,512,128), (128,), (128,), (128,), (3,3,128,128),
    (128,), (128,), (128,), (1,1,128,512), (512,), (512,), (512,), (1,1,512,128), (128,),
    (128,), (128,), (3,3,128,128), (128,), (128,), (128,), (1,1,128,512), (512,), (512,),
    (512,), (1,1,512,128), (128,), (128,), (128,), (3,3,128,128), (128,), (128,), (128,),
    (1,1,128,512), (512,), (512,), (512,), (1,1,512,256), (256,), (256,), (256,),
    (3,3,256,256), (256,), (256,), (256,), (1,1,512,1024), (1024,), (1,1,256,1024), (1024,),
    (1024,), (1024,), (1024,), (1024,), (1,1,1024,256), (256,), (256,), (256,), (3,3,256,256),
    (256,), (256,), (256,), (1,1,256,1024), (1024,), (1024,), (1024,), (1,1,1024,256), (256,),
    (256,), (256,), (3,3,256,256), (256,), (256,), (256,), (1,1,256,1024), (1024,), (1024,),
    (1024,), (1,1,1024,256), (256,), (256,), (256,), (3,3,256,256), (256,), (256,), (256,),
    (1,1,256,1024), (1024,), (1024,), (1024,), (1,1,1024,256), (256,), (256,), (256,),
    (3,3,256,256), (256,), (256,), (256,), (1,1,256,1024), (1024,), (1024,), (1024,),
    (1,1,1024,256), (256,), (256,), (256,), (3,3,256,256), (256,), (256,), (256,),
    (1,1,256,1024), (1024,), (1024,), (1024,), (1,1,1024,512), (512,), (512,), (512,),
    (3,3,512,512), (512,), (512,), (512,), (1,1,1024,2048), (2048,), (1,1,512,2048), (2048,),
    (2048,), (2048,), (2048,), (2048,), (1,1,2048,512), (512,), (512,), (512,), (3,3,512,512),
    (512,), (512,), (512,), (1,1,512,2048), (2048,), (2048,), (2048,), (1,1,2048,512), (512,),
    (512,), (512,), (3,3,512,512), (512,), (512,), (512,), (1,1,512,2048), (2048,), (2048,),
    (2048,), (2048,1000), (1000,)
)
RESNET50_TENSORS = 214
RESNET50_PARAMS = 25_583_592


class Item(NamedTuple):
    """One thing to measure: a tensor size in bytes (None for the ResNet-50 step)."""

    nbytes: int | None
    iters: int
    warmup: int

    @property
    def label(self) -> str:
        return RESNET50 if self.nbytes is None else str(self.nbytes)


def parse_item(text: str) -> Item:
    what, iters, warmup = text.split(":")
    nbytes = None if what == RESNET50 else int(what)
    if nbytes is not None and (nbytes <= 0 or nbytes % 4):
        raise ValueError(f"size {nbytes} is not a positive multiple of 4 bytes (float32)")
    return Item(nbytes, int(iters), int(warmup))


def resnet50_nbytes() -> int:
    return 4 * sum(int(np.prod(shape)) for shape in RESNET50_SHAPES)


class Peer:
    """What the measuring loop needs from a communication library.

    ``dense(n)`` makes an input of n float32 ones and ``group(shapes)`` a list of them;
    ``allreduce``/``grouped`` reduce (Sum) and return the result; ``first(result)`` is the
    result's first element (for the check); ``barrier`` lines the instances up.
    """

    name = ""
    rank = 0
    size = 1

    def dense(self, count: int) -> Any:
        raise NotImplementedError

    def group(self, shapes: Sequence[Tuple[int, ...]]) -> List[Any]:
        return [self.dense_shaped(shape) for shape in shapes]

    def dense_shaped(self, shape: Tuple[int, ...]) -> Any:
        raise NotImplementedError

    def allreduce(self, value: Any) -> Any:
        raise NotImplementedError

    def grouped(self, values: List[Any]) -> Any:
        raise NotImplementedError

    def first(self, result: Any) -> float:
        raise NotImplementedError

    def barrier(self) -> None:
        raise NotImplementedError

    def info(self) -> Dict[str, Any]:
        return {}

    def close(self) -> None:
        pass


# ---- TensorFlow-based peers ------------------------------------------------------------------
def _import_tensorflow() -> Any:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    return tf


class HorovodPeer(Peer):
    """Plain horovod.tensorflow in eager mode: hvd.allreduce and hvd.grouped_allreduce."""

    def __init__(self, name: str) -> None:
        self.tf = tf = _import_tensorflow()
        import horovod.tensorflow as hvd
        self.hvd = hvd
        self.name = name
        self._start()
        self.rank, self.size = hvd.rank(), hvd.size()
        self._token = tf.zeros([1], tf.float32)

    def _start(self) -> None:
        self.hvd.init()

    def dense(self, count: int) -> Any:
        return self.tf.ones([count], self.tf.float32)

    def dense_shaped(self, shape: Tuple[int, ...]) -> Any:
        return self.tf.ones(shape, self.tf.float32)

    def allreduce(self, value: Any) -> Any:
        return self.hvd.allreduce(value, op=self.hvd.Sum)

    def grouped(self, values: List[Any]) -> Any:
        return self.hvd.grouped_allreduce(values, op=self.hvd.Sum)

    def first(self, result: Any) -> float:
        tensor = result[0] if isinstance(result, (list, tuple)) else result
        return float(self.tf.reshape(tensor, [-1])[0].numpy())

    def barrier(self) -> None:
        self.hvd.allreduce(self._token, op=self.hvd.Sum, name=BARRIER)

    def info(self) -> Dict[str, Any]:
        import horovod
        hvd = self.hvd
        return {
            "tensorflow": self.tf.__version__,
            "horovod": horovod.__version__,
            "horovod_controller": "mpi" if hvd.mpi_enabled() else
                                  "gloo" if hvd.gloo_enabled() else "unknown",
            "environment": {name: os.environ.get(name) for name in (
                "HOROVOD_CONTROLLER", "HOROVOD_CPU_OPERATIONS", "HOROVOD_CYCLE_TIME",
                "HOROVOD_FUSION_THRESHOLD", "HOROVOD_GLOO_IFACE")},
        }

    def close(self) -> None:
        self.hvd.shutdown()


class OursPeer(HorovodPeer):
    """popdist_launcher.collectives: allreduce and grouped_allreduce (eager)."""

    def __init__(self) -> None:
        from popdist_launcher import collectives
        self.col = collectives
        super().__init__("ours")

    def _start(self) -> None:
        self.col.init()

    def allreduce(self, value: Any) -> Any:
        return self.col.allreduce(value, op=self.col.Sum)

    def grouped(self, values: List[Any]) -> Any:
        return self.col.grouped_allreduce(values, op=self.col.Sum)

    def barrier(self) -> None:
        self.col.allreduce(self._token, op=self.col.Sum, name=BARRIER)

    def close(self) -> None:
        self.col.shutdown()


class MwmsPeer(Peer):
    """tf.distribute.MultiWorkerMirroredStrategy, one CPU replica per worker.

    Each item gets its own tf.function, in which ``strategy.run`` calls the replica context's
    ``all_reduce`` (a list of tensors goes through one batched all-reduce, with the strategy's
    default communication options).
    """

    name = "mwms"

    def __init__(self) -> None:
        self.tf = tf = _import_tensorflow()
        self.strategy = tf.distribute.MultiWorkerMirroredStrategy()
        self.rank = int(self.strategy.cluster_resolver.task_id)
        self.size = int(self.strategy.num_replicas_in_sync)
        self._barrier_fn = self._reducer()
        self._token = tf.zeros([1], tf.float32)
        self._fns: Dict[Any, Callable[[Any], Any]] = {}

    def _reducer(self) -> Callable[[Any], Any]:
        tf, strategy = self.tf, self.strategy

        def replica_fn(value: Any) -> Any:
            # tf.identity places the input on this replica's device (an alias, not a copy): the
            # all-reduce needs a device to reduce to, which a function argument does not have.
            local = tf.nest.map_structure(tf.identity, value)
            return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM,
                                                                   local)

        @tf.function
        def reduce(value: Any) -> Any:
            return strategy.run(replica_fn, args=(value,))

        return reduce

    def _fn_for(self, key: Any) -> Callable[[Any], Any]:
        if key not in self._fns:
            self._fns[key] = self._reducer()
        return self._fns[key]

    def dense(self, count: int) -> Any:
        return self.tf.ones([count], self.tf.float32)

    def dense_shaped(self, shape: Tuple[int, ...]) -> Any:
        return self.tf.ones(shape, self.tf.float32)

    def allreduce(self, value: Any) -> Any:
        return self._fn_for(tuple(value.shape))(value)

    def grouped(self, values: List[Any]) -> Any:
        return self._fn_for(RESNET50)(values)

    def first(self, result: Any) -> float:
        tensor = result[0] if isinstance(result, (list, tuple)) else result
        tensor = self.strategy.experimental_local_results(tensor)[0]
        return float(self.tf.reshape(tensor, [-1])[0].numpy())

    def barrier(self) -> None:
        self._barrier_fn(self._token)

    def info(self) -> Dict[str, Any]:
        return {"tensorflow": self.tf.__version__,
                "communication": "tf.distribute.experimental.CommunicationOptions() (defaults)"}

    def close(self) -> None:
        # A worker that leaves at once can take data a slower peer still has to fetch from it
        # (TensorFlow's collectives pull over gRPC); a barrier and a short pause avoid that.
        self.barrier()
        time.sleep(1.0)


# ---- mpi4py ---------------------------------------------------------------------------------
class Mpi4pyPeer(Peer):
    """mpi4py ``comm.Allreduce`` (buffer interface) on numpy float32 arrays.

    The grouped step packs the tensors into one flat buffer, reduces it and unpacks the result
    into per-tensor arrays: the same copies Horovod's tensor fusion makes, timed with it.
    """

    name = "mpi4py"

    def __init__(self) -> None:
        from mpi4py import MPI
        self.MPI = MPI
        self.comm = MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self._out: Dict[int, np.ndarray] = {}
        self._packed: Tuple[np.ndarray, np.ndarray] | None = None
        self._unpacked: List[np.ndarray] = []

    def dense(self, count: int) -> Any:
        return np.ones(count, np.float32)

    def dense_shaped(self, shape: Tuple[int, ...]) -> Any:
        return np.ones(shape, np.float32)

    def allreduce(self, value: np.ndarray) -> np.ndarray:
        out = self._out.get(value.size)
        if out is None:
            out = self._out[value.size] = np.empty_like(value)
        self.comm.Allreduce(value, out, op=self.MPI.SUM)
        return out

    def grouped(self, values: List[np.ndarray]) -> List[np.ndarray]:
        if self._packed is None:
            total = sum(v.size for v in values)
            self._packed = (np.empty(total, np.float32), np.empty(total, np.float32))
            self._unpacked = [np.empty_like(v) for v in values]
        send, recv = self._packed
        offset = 0
        for value in values:
            send[offset:offset + value.size] = value.reshape(-1)
            offset += value.size
        self.comm.Allreduce(send, recv, op=self.MPI.SUM)
        offset = 0
        for out in self._unpacked:
            out.reshape(-1)[:] = recv[offset:offset + out.size]
            offset += out.size
        return self._unpacked

    def first(self, result: Any) -> float:
        array = result[0] if isinstance(result, list) else result
        return float(array.reshape(-1)[0])

    def barrier(self) -> None:
        self.comm.Barrier()

    def info(self) -> Dict[str, Any]:
        import mpi4py
        return {"mpi4py": mpi4py.__version__,
                "mpi_library": self.MPI.Get_library_version().split(",")[0].strip("\x00 \n")}

    def close(self) -> None:
        self.MPI.Finalize()  # mpirun reports an error for a rank that leaves without it


def scheduling() -> Dict[str, Any]:
    """How the kernel schedules this instance: with autogroup scheduling on, every session
    (setsid) is one group sharing the CPU fairly with the others, whatever its thread count; so
    whether each instance has a session of its own matters on a busy machine."""
    try:
        with open("/proc/self/autogroup") as f:
            autogroup = f.read().split()[0]
    except OSError:
        autogroup = None
    return {"autogroup": autogroup, "session_leader": os.getsid(0) == os.getpid(),
            "process_group_leader": os.getpgid(0) == os.getpid(), "nice": os.nice(0)}


def make_peer(name: str) -> Peer:
    if name == "ours":
        return OursPeer()
    if name in ("horovod-gloo", "horovod-mpi"):
        return HorovodPeer(name)
    if name == "mwms":
        return MwmsPeer()
    if name == "mpi4py":
        return Mpi4pyPeer()
    raise SystemExit(f"unknown peer {name!r}; expected one of {', '.join(PEERS)}")


# ---- measuring ------------------------------------------------------------------------------
def measure(peer: Peer, item: Item) -> Dict[str, Any]:
    """Warm-up, barrier, then ITERS individually timed calls; the last result is checked."""
    if item.nbytes is None:
        call, arg = peer.grouped, peer.group(RESNET50_SHAPES)
        nbytes = resnet50_nbytes()
    else:
        call, arg = peer.allreduce, peer.dense(item.nbytes // 4)
        nbytes = item.nbytes
    result = None
    for _ in range(item.warmup):
        result = call(arg)
    peer.barrier()
    times: List[float] = []
    for _ in range(item.iters):
        started = time.perf_counter()
        result = call(arg)
        times.append(time.perf_counter() - started)
    got = peer.first(result) if result is not None else None
    return {"item": item.label, "bytes": nbytes, "iters": item.iters, "warmup": item.warmup,
            "times_s": times, "check": {"expected": float(peer.size), "got": got,
                                        "ok": got == float(peer.size)}}


def keras_resnet50_shapes() -> List[Tuple[int, ...]]:
    tf = _import_tensorflow()
    model = tf.keras.applications.ResNet50(weights=None)
    return [tuple(int(d) for d in var.shape) for var in model.trainable_variables]


def main(argv: Sequence[str]) -> int:
    if list(argv) == ["--print-resnet50-shapes"]:
        shapes = keras_resnet50_shapes()
        print(", ".join(str(shape).replace(" ", "") for shape in shapes))
        print(f"# {len(shapes)} tensors, {sum(int(np.prod(s)) for s in shapes)} parameters; "
              f"matches RESNET50_SHAPES: {tuple(shapes) == RESNET50_SHAPES}", file=sys.stderr)
        return 0
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    peer_name, out_path, items = argv[0], argv[1], [parse_item(text) for text in argv[2:]]
    started = time.perf_counter()
    peer = make_peer(peer_name)
    setup_s = time.perf_counter() - started
    results = [measure(peer, item) for item in items]
    if peer.rank == 0:
        report = {"peer": peer.name, "size": peer.size, "setup_s": setup_s,
                  "pid": os.getpid(), "info": {**peer.info(), "scheduling": scheduling()},
                  "results": results}
        tmp = out_path + ".tmp"
        with open(tmp, "w") as out:
            json.dump(report, out)
        os.replace(tmp, out_path)
    bad = [r["item"] for r in results if not r["check"]["ok"]]
    peer.close()
    if bad:
        print(f"{peer_name} rank {peer.rank}: wrong allreduce result for {', '.join(bad)}",
              file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    assert len(RESNET50_SHAPES) == RESNET50_TENSORS
    assert resnet50_nbytes() == 4 * RESNET50_PARAMS
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    # TensorFlow's and Horovod's interpreter teardown is slow and sometimes noisy; the work is
    # done and written, so leave directly.
    os._exit(code)
