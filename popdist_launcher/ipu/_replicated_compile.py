"""One-process replication of ``ipu_compiler.compile`` programs in TF1 graphs, as Graphcore's
IPU system replicates a program over the IPUs ``IPUConfig`` selects: with
``auto_select_ipus = N`` (or ``select_ipus``) and programs of one IPU per replica, a program
built outside any strategy runs as N replicas in this process (a program whose shards or
pipeline stages span k IPUs, as N // k).

Each replica is a copy of the program in the graph: it reads its own infeed elements (replica r
of R: r, R + r, ...), enqueues into its own outfeed queue, has its own copy of the variables
(``_replica_variables``), and its collectives meet the other replicas' at run time
(``_replica_exchange``). ``compile`` returns replica 0's outputs, as Graphcore's executor copies
outputs back from replica 0, and running any of them runs every replica.

On an IPU the replica count is decided when the program is compiled for the device, at its
first run, so a TF1 program may build its graph before it configures the IPU system, or
configure another one after building it. A program is built for the system configured when
``compile`` is called (one replica, provisionally, before any); when the IPU system configured
then replicates it otherwise (checked by configure_ipu_system for the default graph's programs,
and by a new Session for its graph's), it is rebuilt, and what ``compile`` returned (and the
outfeed dequeues already taken) are rewired to the new copy.
"""
from __future__ import annotations

import contextlib
import logging
import functools
import math
from typing import Any, Callable, List, Optional, Sequence, Tuple

import tensorflow as tf

from popdist_launcher.ipu._loop_support import PROGRAM, REPLICA, GraphUpdates, ProgramReplica
from popdist_launcher.ipu._replica_exchange import Exchange
from popdist_launcher.ipu._replica_variables import ReplicaVariables
from popdist_launcher.ipu_runtime import configured_system
from popdist_launcher.ipu_runtime.tf_internal import session, variable_scope

log = logging.getLogger(__name__)


def split_outputs(result: Any) -> Tuple[list, list]:
    """A computation's result as (tensors, operations), checked as Graphcore's compile checks it:
    zero or more tensors (or nested structures of them) followed by zero or more operations."""
    if _is_estimator_spec(result):
        raise ValueError("Your computation output contains an EstimatorSpec or IPUEstimatorSpec "
                         "object. When you use an IPUEstimator, it already handles all the "
                         "compilation and no manual call to compile() is needed.")
    outputs = ([] if result is None else list(result) if isinstance(result, (list, tuple))
               else [result])
    first_op = next((i for i, o in enumerate(outputs) if isinstance(o, tf.Operation)), len(outputs))
    tensors, operations = outputs[:first_op], outputs[first_op:]
    if not all(isinstance(o, tf.Operation) for o in operations):
        raise ValueError("computation must return zero or more tensors followed by zero or more "
                         "operations.")
    return tensors, operations


def _is_estimator_spec(value: Any) -> bool:
    if type(value).__name__ in ("EstimatorSpec", "IPUEstimatorSpec"):
        return True
    return isinstance(value, (list, tuple)) and any(_is_estimator_spec(v) for v in value)


def program_replicas(system=None, span: int = 1) -> Tuple[int, bool]:
    """(replicas, provisional) for a program built now outside any strategy: the IPUs the
    configured system selected over the IPUs a replica spans (the launch's IPUs per replica, or
    ``span``, the IPUs the program's shards or pipeline stages use, rounded up to a power of
    two), or one provisional replica before the program configured its system. With
    multi-replica distribution over several instances, one replica (the replicas of the other
    instances are out of reach here)."""
    system = configured_system.get_configured_system() if system is None else system
    if system is None or system.implicit:
        return 1, True
    if system.process_count > 1:
        return 1, False
    return max(1, system.num_ipus // max(system.ipus_per_replica, span)), False


def replicates_here() -> bool:
    """Whether compile() builds a Program here: a TF1 graph, outside any strategy."""
    return not tf.compat.v1.executing_eagerly_outside_functions() and \
        not tf.distribute.has_strategy()


class Program:
    """One ``compile(computation, inputs)`` call in a TF1 graph: built for a replica count, and
    rebuilt for another when the program configures another IPU system after building it."""

    def __init__(self, computation: Callable, inputs: Sequence) -> None:
        self._computation = computation
        self._inputs = list(inputs)
        self._graph = tf.compat.v1.get_default_graph()
        self._device_stack = self._graph._device_function_stack.copy()  # noqa: SLF001
        self._name_scope = self._graph.get_name_scope()
        self._variable_scope = tf.compat.v1.get_variable_scope()
        self._scope_counts = dict(variable_scope.get_variable_scope_store().variable_scopes_count)
        self._created: Optional[list] = None  # variables the first build created directly
        self._structure: Optional[list] = None  # the first build's output tensors (structure)
        self._outputs: List[tf.Operation] = []  # the ops compile returned: identities or a group
        self._watched: list = []  # the outfeeds it enqueues into (told when it is built again)
        self.replicas = 0
        self.span = 1  # the IPUs a replica spans (its shards, rounded up to a power of two)
        self.exchange: Optional[Exchange] = None

    def note_ipus(self, ipus: int) -> None:
        """The program places work on ``ipus`` IPUs per replica (shards, pipeline stages;
        rounded up to a power of two): a system of N IPUs runs N // ipus replicas of it."""
        self.span = max(self.span, 2 ** math.ceil(math.log2(max(1, ipus))))

    def watch(self, feed) -> None:
        """Tell ``feed`` (its ``_before_rebuild`` and ``_after_rebuild``) when this program is
        built again: an outfeed it enqueues into."""
        if all(feed is not f for f in self._watched):
            self._watched.append(feed)

    def build(self, replicas: int, provisional: bool):
        """Build the program for ``replicas`` replicas; what compile returns."""
        leaves, dependencies = self._build(replicas, provisional)
        if not leaves:
            outputs = tf.group(*dependencies)
            self._outputs = [outputs]
        else:
            with tf.control_dependencies(dependencies):
                identities = [tf.identity(leaf) for leaf in leaves]
            self._outputs = [t.op for t in identities]
            outputs = tf.nest.pack_sequence_as(self._structure, identities)
        programs = getattr(self._graph, "_ipu_programs", None)
        if programs is None:
            programs = self._graph._ipu_programs = []  # noqa: SLF001
            _check_before_sessions()
        programs.append(self)
        return outputs

    def rebuild(self, replicas: int) -> None:
        """Build the program again for ``replicas`` replicas and rewire the outputs compile
        returned to the new copy (the former copy stays in the graph, unused)."""
        store = variable_scope.get_variable_scope_store()
        counts = dict(store.variable_scopes_count)
        graph = self._graph
        saved_devices = graph._device_function_stack  # noqa: SLF001
        graph._device_function_stack = self._device_stack.copy()  # noqa: SLF001
        try:
            with tf.control_dependencies(None), \
                    tf.compat.v1.name_scope(self._name_scope + "/" if self._name_scope else None), \
                    tf.compat.v1.variable_scope(self._variable_scope,
                                                auxiliary_name_scope=False):
                leaves, dependencies = self._build(replicas, provisional=False)
        finally:
            graph._device_function_stack = saved_devices  # noqa: SLF001
            store.variable_scopes_count = counts
        grouped = not tf.nest.flatten(self._structure)
        if len(leaves) != (0 if grouped else len(self._outputs)):
            raise RuntimeError(f"the IPU program built other outputs when it was rebuilt for "
                               f"{replicas} replica(s); build it after configure_ipu_system().")
        for index, output in enumerate(self._outputs):
            if not grouped:
                output._update_input(0, leaves[index])  # noqa: SLF001
            output._remove_all_control_inputs()  # noqa: SLF001
            if dependencies:
                output._add_control_inputs(dependencies)  # noqa: SLF001
        log.info("IPU program rebuilt for %d replica(s), as configure_ipu_system selected.",
                 replicas)

    def _build(self, replicas: int, provisional: bool) -> Tuple[list, list]:
        """(replica 0's output tensors, flat; the ops every output waits for: all replicas)."""
        store = variable_scope.get_variable_scope_store()
        self.exchange = Exchange(replicas)
        prologue = None
        if replicas > 1:
            with tf.init_scope(), tf.compat.v1.name_scope(None):
                prologue = tf.no_op(name="ipu_replicas_start")
        built = []
        for index in range(replicas):
            store.variable_scopes_count = dict(self._scope_counts)
            reference = None if self._created is None and index == 0 else self._created
            variables = ReplicaVariables(index, reference, prologue if index else None)
            replica = ProgramReplica(index, replicas, self, provisional)
            tokens = (REPLICA.set(replica), PROGRAM.set(object()))
            try:
                with tf.control_dependencies([prologue] if prologue is not None else []), \
                        tf.name_scope(f"replica_{index}") if index else contextlib.nullcontext(), \
                        variables.scope():
                    updates = GraphUpdates()  # the update ops it makes run with its outputs
                    tensors, operations = split_outputs(self._computation(*self._inputs))
                    operations += updates.made()
            finally:
                PROGRAM.reset(tokens[1])
                REPLICA.reset(tokens[0])
            if reference is None:
                self._created = variables.created
            if self._structure is None:
                self._structure = list(tensors)
            built.append((tf.nest.flatten(tensors), operations))
            if index == 0 and not provisional:
                wanted, _ = program_replicas(span=self.span)
                if wanted != replicas:  # its shards span more IPUs than one per replica
                    for feed in self._watched:
                        feed._before_rebuild()  # noqa: SLF001
                    return self._build(wanted, provisional)
        self.replicas = replicas
        leaves = [tf.convert_to_tensor(t) for t in built[0][0]]
        dependencies = list(built[0][1])
        for flat, operations in built[1:]:
            dependencies += [tf.convert_to_tensor(t).op for t in flat] + list(operations)
        return leaves, dependencies


def rebuild_stale_programs(graph, system=None) -> None:
    """Rebuild the programs of ``graph`` that the configured IPU system (``system``, or the one
    configured now) replicates otherwise than they were built, and rewire what they returned."""
    system = configured_system.get_configured_system() if system is None else system
    if system is None or system.implicit:
        return
    programs = [(p, program_replicas(system, p.span)[0])
                for p in getattr(graph, "_ipu_programs", ())]
    programs = [(p, replicas) for p, replicas in programs if p.replicas != replicas]
    if not programs:
        return
    if graph.finalized:
        log.warning("The IPU system configured selects %d IPU(s), but the IPU program built "
                    "before it is in a finalized graph: it keeps %d replica(s).",
                    system.num_ipus, programs[0][0].replicas)
        return
    feeds = []
    for program, _ in programs:
        feeds += [f for f in program._watched if all(f is not g for g in feeds)]  # noqa: SLF001
    for feed in feeds:
        feed._before_rebuild()  # noqa: SLF001
    with graph.as_default():
        for program, replicas in programs:
            program.rebuild(replicas)
        for feed in feeds:
            feed._after_rebuild()  # noqa: SLF001


def _after_configure(system) -> None:
    """configure_ipu_system's hook: the default graph's programs, for the system configured."""
    if not tf.compat.v1.executing_eagerly_outside_functions():
        rebuild_stale_programs(tf.compat.v1.get_default_graph(), system)


def _check_before_sessions() -> None:
    """A new TF1 Session first rebuilds its graph's stale programs (once per process)."""
    stock = session.BaseSession.__init__
    if getattr(stock, "_ipu_programs", False):
        return

    @functools.wraps(stock)
    def __init__(self, target="", graph=None, config=None):
        programs_graph = graph if graph is not None else tf.compat.v1.get_default_graph()
        if getattr(programs_graph, "_ipu_programs", None):
            rebuild_stale_programs(programs_graph)
        stock(self, target, graph, config)

    __init__._ipu_programs = True
    session.BaseSession.__init__ = __init__


configured_system.add_listener(_after_configure)
