"""Worker: every collectives check in eager, tf.function and Session modes, results as JSON.

Usage (through the launcher): collectives_checks.py OUT_DIR [MODE,...]
Writes OUT_DIR/instance-<rank>.json: {"identity": {...}, "checks": {"<mode>/<check>": value}}.
A value is plain JSON data (IndexedSlices become {"values", "indices", "dense_shape"}); a check
that raised is recorded as {"error": "<Type>: <message>"}, so one failure hides no other.
"""
import json
import os
import sys
import time
import traceback

import numpy as np
import tensorflow as tf

from popdist_launcher import collectives as C

DTYPES = [tf.float16, tf.float32, tf.float64, tf.int16, tf.int32, tf.int64]
OPS = {"sum": C.Sum, "average": C.Average, "min": C.Min, "max": C.Max, "product": C.Product}


def to_py(value):
    if hasattr(value, "indices") and hasattr(value, "values"):  # IndexedSlices(Value)
        shape = value.dense_shape
        return {"values": to_py(value.values), "indices": to_py(value.indices),
                "dense_shape": None if shape is None else to_py(shape)}
    if isinstance(value, (list, tuple)):
        return [to_py(v) for v in value]
    if hasattr(value, "numpy"):
        value = value.numpy()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


class Eager:
    name = "eager"

    def run(self, build):
        return to_py(build())

    def variables(self, initial):
        return [tf.Variable(v) for v in initial]

    def read(self, variables):
        return [to_py(v.read_value()) for v in variables]

    def run_op(self, make_op):
        op = make_op()
        assert op is None, f"broadcast_variables must return None in eager mode, got {op!r}"


class Function(Eager):
    name = "function"

    def run(self, build):
        return to_py(tf.function(build, autograph=False)())

    def run_op(self, make_op):
        def body():
            op = make_op()
            assert isinstance(op, tf.Operation), f"expected the group op, got {op!r}"
        tf.function(body, autograph=False)()


class Session:
    name = "session"

    def __init__(self):
        self.graph = tf.Graph()
        with self.graph.as_default():
            self.sess = tf.compat.v1.Session()

    def run(self, build):
        with self.graph.as_default():
            fetch = build()
            return to_py(self.sess.run(fetch))

    def variables(self, initial):
        with self.graph.as_default():
            variables = [tf.Variable(v) for v in initial]
            self.sess.run([v.initializer for v in variables])
            return variables

    def read(self, variables):
        with self.graph.as_default():
            return [to_py(self.sess.run(v.read_value())) for v in variables]

    def run_op(self, make_op):
        with self.graph.as_default():
            op = make_op()
            assert isinstance(op, tf.Operation), f"expected the group op, got {op!r}"
            self.sess.run(op)


def checks(mode, rank, size):
    """(check name, callable returning JSON data) for this mode."""
    out = []

    def add(name, fn):
        out.append((f"{mode.name}/{name}", fn))

    for dt in DTYPES:
        d = dt.name
        base = [rank, rank + 1, -(rank + 2)]
        for op_name, op in OPS.items():
            add(f"allreduce_{op_name}/{d}",
                lambda op=op, dt=dt, base=base: mode.run(
                    lambda: C.allreduce(tf.constant(base, dt), op=op)))
        add(f"allreduce_default_op/{d}",
            lambda dt=dt, base=base: mode.run(lambda: C.allreduce(tf.constant(base, dt))))
        add(f"allreduce_named/{d}",
            lambda dt=dt, base=base: mode.run(
                lambda: C.allreduce(tf.constant(base, dt), op=C.Sum, name=f"named {dt.name}!")))
        if dt.is_integer:
            add(f"scaled_sum/{d}", lambda dt=dt, base=base: mode.run(lambda: C.allreduce(
                tf.constant(base, dt), op=C.Sum, prescale_factor=3.0, postscale_factor=2.0)))
            add(f"scaled_average/{d}", lambda dt=dt, base=base: mode.run(lambda: C.allreduce(
                tf.constant(base, dt), op=C.Average, prescale_factor=3.0, postscale_factor=2.0)))
        else:
            add(f"scaled_sum/{d}", lambda dt=dt, base=base: mode.run(lambda: C.allreduce(
                tf.constant(base, dt), op=C.Sum, prescale_factor=2.0, postscale_factor=0.25)))
            add(f"scaled_average/{d}", lambda dt=dt, base=base: mode.run(lambda: C.allreduce(
                tf.constant(base, dt), op=C.Average, prescale_factor=3.0, postscale_factor=0.5)))
        add(f"allgather_rank/{d}",
            lambda dt=dt: mode.run(lambda: C.allgather(tf.constant([rank], dt))))
        add(f"allgather_scalar/{d}",
            lambda dt=dt: mode.run(lambda: C.allgather(tf.constant(rank, dt))))
        add(f"allgather_ragged/{d}", lambda dt=dt: mode.run(
            lambda: C.allgather(tf.fill([rank + 1, 2], tf.constant(rank, dt)))))
        for root in (0, size - 1):
            add(f"broadcast_root{root}/{d}", lambda dt=dt, root=root: mode.run(lambda: C.broadcast(
                tf.constant([10 * rank + 1, 10 * rank + 2], dt), root_rank=root)))
        for op_name in ("sum", "average"):
            add(f"indexed_slices_{op_name}/{d}", lambda dt=dt, op=OPS[op_name]: mode.run(
                lambda: C.allreduce(tf.IndexedSlices(
                    tf.constant([[2 * rank + 1, -(2 * rank + 1)]], dt),
                    tf.constant([size - 1 - rank], tf.int64),
                    dense_shape=tf.constant([size, 2], tf.int64)), op=op)))
        add(f"broadcast_variables/{d}", lambda dt=dt: broadcast_variables(mode, dt, rank))
        add(f"grouped_allreduce_sum/{d}", lambda dt=dt: mode.run(lambda: grouped(dt, rank, C.Sum)))
        add(f"grouped_allreduce_average/{d}",
            lambda dt=dt: mode.run(lambda: grouped(dt, rank, C.Average)))
    return out


def independent_collectives(rank):
    """In a tf.function, the second of two collectives must not wait for the first (the stall
    marks must not serialize them): no path from the first Horovod op to the second. The marks
    run no Python (no py_function/numpy_function op), and what consumes a collective's result
    in the function does not wait for the marks that record the ends (only the function's
    return does, as for every stateful op)."""
    @tf.function(autograph=False)
    def two(a, b):
        first = C.allreduce(a, op=C.Sum, name="first_collective")
        second = C.allreduce(b, op=C.Sum, name="second_collective")
        return (tf.identity(first, name="first_consumer"),
                tf.identity(second, name="second_consumer"))

    args = (tf.constant([rank, 1.0]), tf.constant([2.0, rank]))
    graph = two.get_concrete_function(*args).graph
    ops = {op.name: op for op in graph.get_operations()}

    def ancestors(*names):
        seen, todo = set(), [ops[name] for name in names]
        while todo:
            op = todo.pop()
            for parent in [t.op for t in op.inputs] + list(op.control_inputs):
                if parent.name not in seen:
                    seen.add(parent.name)
                    todo.append(parent)
        return seen

    before_consumers = ancestors("first_consumer", "second_consumer")
    return {"second_waits_for_first": "first_collective" in ancestors("second_collective"),
            "python_callbacks": sorted(op.type for op in ops.values()
                                       if op.type in ("EagerPyFunc", "PyFunc", "PyFuncStateless")),
            "begin_marks": sum(op.type == "ResourceScatterAdd" for op in ops.values()),
            "consumers_wait_for_end_marks": any(name.startswith("collective_end")
                                                for name in before_consumers),
            "values": to_py(two(*args))}


def grouped(dt, rank, op):
    return C.grouped_allreduce([
        tf.constant([rank + 1, 2 * rank], dt),
        tf.constant([[float(rank)], [1.5]], tf.float32),
        tf.constant([rank * 3], dt),
        tf.IndexedSlices(tf.constant([[rank + 1]], dt), tf.constant([rank], tf.int32)),
    ], op=op)


def broadcast_variables(mode, dt, rank):
    root = 1 if C.size() > 1 else 0
    variables = mode.variables([np.array([rank + 5, rank + 6], dt.as_numpy_dtype),
                                np.array([[rank * 2]], dt.as_numpy_dtype)])
    mode.run_op(lambda: C.broadcast_variables(variables, root_rank=root))
    return mode.read(variables)


def main():
    out_dir = sys.argv[1]
    wanted = sys.argv[2].split(",") if len(sys.argv) > 2 else ["eager", "function", "session"]
    C.init(stall_timeout=120)
    rank, size = C.rank(), C.size()
    results = {"identity": {"rank": rank, "size": size, "local_rank": C.local_rank(),
                            "local_size": C.local_size(), "initialized": C.is_initialized()},
               "checks": {}, "seconds": {}}
    modes = {"eager": Eager, "function": Function, "session": Session}
    for mode_name in wanted:
        started = time.monotonic()
        mode = modes[mode_name]()
        for name, fn in checks(mode, rank, size):
            try:
                results["checks"][name] = fn()
            except Exception as exc:  # recorded, asserted by the test
                results["checks"][name] = {"error": f"{type(exc).__name__}: {exc}"}
                traceback.print_exc()
        results["seconds"][mode_name] = round(time.monotonic() - started, 2)
    if "function" in wanted:
        try:
            results["checks"]["function/independent_collectives"] = independent_collectives(rank)
        except Exception as exc:
            results["checks"]["function/independent_collectives"] = {
                "error": f"{type(exc).__name__}: {exc}"}
    # Errors the API must raise without any communication.
    for name, fn in [
        ("errors/int_fractional_scale", lambda: C.allreduce(tf.constant([1]), prescale_factor=0.5)),
        ("errors/sparse_max", lambda: C.allreduce(
            tf.IndexedSlices(tf.constant([[1.0]]), tf.constant([0])), op=C.Max)),
        ("errors/bad_op", lambda: C.allreduce(tf.constant([1.0]), op="median")),
        ("errors/bad_root", lambda: C.broadcast(tf.constant([1.0]), root_rank=size)),
    ]:
        try:
            fn()
            results["checks"][name] = {"error": None}
        except Exception as exc:
            results["checks"][name] = {"error": f"{type(exc).__name__}: {exc}"}
    path = os.path.join(out_dir, f"instance-{rank}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(results, f)
    os.replace(path + ".tmp", path)
    C.shutdown()
    assert not C.is_initialized()


if __name__ == "__main__":
    main()
