"""ReplicaContext.all_reduce under Graphcore's PopDistStrategy, as popdist_strategy_test.py's
test_strategy calls it (graphcore/tensorflow r2.6/sdk-release-3.4, ipu/distributed/): SUM and MEAN
over the replicas of the configured IPU system, run eagerly, with a tf.function as the replica
function, and inside a tf.function; of a tensor every replica passes as the same object, of a value
that differs per replica, and of a nest; a reduce inside merge_call; strategy.reduce of the results
(on the host: every replica of the job); and the same with add_ipu_cross_replica_reductions off
(each replica keeps its value), as test_strategy_without_ipu_reduction turns it off; and
test_distribute_dataset's ipu_infeed_queue.IPUIterator, read by next() in the replica function
(the sums of squares of three steps, reduced over the job). Run with
``poprun-lite -np 2 [--num-replicas 4]``; writes OUT/all-reduce-<instance>.json with each local
replica's results.

CONFIG says how the program sets up the IPU system:
  global      popdist.tensorflow.set_ipu_config, configure_ipu_system, then the strategy (as
              Graphcore's programs): multi-replica distribution over the instances
  ops-first   as global, after building and reading the instance's shard of a dataset (as
              Graphcore's CNN programs do before configure_ipu_system)
  local       configure_ipu_system with the local replicas only, then update_ipu_config (as
              popdist_strategy_test): the system in effect replicates within the instance
  unconfigured  no configure_ipu_system at all

usage: popdist_all_reduce.py OUT_DIR CONFIG
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import popdist  # noqa: E402
import popdist.tensorflow  # noqa: E402
from tensorflow.python.distribute import distribution_strategy_context  # noqa: E402
from tensorflow.python.distribute.reduce_util import ReduceOp  # noqa: E402
from tensorflow.python.eager import def_function  # noqa: E402
from tensorflow.python.framework import constant_op, dtypes  # noqa: E402
from tensorflow.python.ipu.config import IPUConfig  # noqa: E402
from tensorflow.python.ipu import ipu_infeed_queue  # noqa: E402
from tensorflow.python.ipu.distributed.popdist_strategy import PopDistStrategy  # noqa: E402
from tensorflow.python.ipu.ops import cross_replica_ops, replication_ops  # noqa: E402
from tensorflow.python.ops import math_ops, variables  # noqa: E402
from tensorflow.python.util import nest  # noqa: E402

out_dir, how = sys.argv[1], sys.argv[2]
if how == "ops-first":  # TensorFlow runs operations before the IPU system exists
    from tensorflow.python.data.ops import dataset_ops
    shard = dataset_ops.Dataset.range(8).shard(popdist.getNumInstances(), popdist.getInstanceIndex())
    assert [int(n) for n in shard] == list(range(popdist.getInstanceIndex(), 8, 2))
config = IPUConfig()
if how in ("global", "ops-first"):
    popdist.tensorflow.set_ipu_config(config, ipus_per_replica=1, configure_device=True)
    config.configure_ipu_system()
elif how == "local":
    config.auto_select_ipus = popdist.getNumLocalReplicas()
    config.configure_ipu_system()
strategy = PopDistStrategy()
if how != "unconfigured":
    strategy.update_ipu_config(config)  # after configure_ipu_system: changes only `config`
out = {"instance": popdist.getInstanceIndex(), "replicas": strategy.num_replicas_in_sync}

with strategy.scope():
    # Instance 0's value everywhere: 1.0.
    v = variables.Variable(initial_value=popdist.getInstanceIndex() + 1, dtype=np.float32)


def replica_fn(reduce_op, x):
    context = distribution_strategy_context.get_replica_context()
    replica = context.replica_id_in_sync_group
    y = v * math_ops.cast(replica + 1, dtypes.float32)  # 1.0 .. R over the job's replicas
    return {
        "same": context.all_reduce(reduce_op, x),  # one tensor object on every local replica
        "per_replica": context.all_reduce(reduce_op, y),
        "nest": context.all_reduce(reduce_op, [x, {"id": math_ops.cast(replica, dtypes.int32)}]),
        "merge_call": context.merge_call(
            lambda s, value: s.reduce(reduce_op, value, axis=None), args=(y,)),
        # the IPU ops count the same replicas
        "cross_replica_sum": cross_replica_ops.cross_replica_sum(y),
        "replication_index": replication_ops.replication_index(),
    }


def locally(result):
    """Each local replica's results, as plain numbers."""
    return [nest.map_structure(lambda t: t.numpy().item(), part)
            for part in strategy.experimental_local_results(result)]


x = constant_op.constant(2.0)
replica_function = def_function.function(replica_fn)


def run_eagerly(reduce_op):
    return strategy.run(replica_fn, args=(reduce_op, x))


def run_replica_function(reduce_op):  # popdist_strategy_test's way
    return strategy.run(replica_function, args=(reduce_op, x))


@def_function.function
def run_in_function(reduce_op):
    return strategy.run(replica_fn, args=(reduce_op, x))


def record(name, result):
    out[name] = locally(result)
    # Reduced again on the host over all replicas (test_strategy's second reduction).
    out[f"{name}/reduce_sum"] = float(strategy.reduce(ReduceOp.SUM, result["same"], axis=None))


for reduce_op in (ReduceOp.SUM, ReduceOp.MEAN):
    for mode, run in (("eager", run_eagerly), ("replica_function", run_replica_function),
                      ("function", run_in_function)):
        record(f"{reduce_op.value}/{mode}", run(reduce_op))

# test_strategy_without_ipu_reduction's switch, on the extended (a new function: traced with it).
strategy._extended._add_ipu_cross_replica_reductions = False  # pylint: disable=protected-access
record("SUM/no_ipu_reductions", strategy.run(def_function.function(replica_fn),
                                             args=(ReduceOp.SUM, x)))
strategy._extended._add_ipu_cross_replica_reductions = True  # pylint: disable=protected-access

# The instance's shard; local replica r of L reads its elements r, L + r, ... (popdist_strategy_test
# reads range(10) at one replica per instance: 1, 13, 41).
from tensorflow.python.data.ops import dataset_ops  # noqa: E402

shard = dataset_ops.Dataset.range(24, output_type=np.float32).shard(
    popdist.getNumInstances(), popdist.getInstanceIndex())
with strategy.scope():
    iterator = ipu_infeed_queue.IPUIterator(dataset=shard)

    @def_function.function
    def square_of_next(it):
        x = next(it)
        return x * x

    out["iterator"] = [
        float(strategy.reduce(ReduceOp.SUM, strategy.run(square_of_next, args=[iterator]),
                              axis=None)) for _ in range(3)]

with open(os.path.join(out_dir, f"all-reduce-{popdist.getInstanceIndex()}.json"), "w") as f:
    json.dump(out, f)
