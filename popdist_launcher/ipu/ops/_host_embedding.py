"""Graphcore's host embeddings on the CPU: a table in this process's memory that IPU replicas
look rows up in and that the optimizer spec updates here (SGD, or SGD with accumulation).

The IPU sends each replica's lookup gradient, scaled by ``-learning_rate``, to the host, which
adds it to the rows looked up; every local replica updates the one table of its process, and
nothing joins the tables of different instances (each PopDist instance is its own host).
"""
from __future__ import annotations

from typing import Any, List, Optional

import tensorflow as tf

PARTITION_STRATEGIES = ("TOKEN", "ENCODING")


class HostEmbeddingOptimizerSpec:
    """How the host updates a host embedding: SGD with a constant learning rate (0: the table
    is only looked up)."""

    def __init__(self, learning_rate: float, optimizer_name: Optional[str] = None) -> None:
        self._learning_rate = learning_rate
        self._optimizer_name = "SGD" if optimizer_name is None else optimizer_name
        self._eager_dummies: dict = {}  # embedding name -> its dummy variable (TF2 behaviour)

    def get_learning_rate(self) -> float:
        return self._learning_rate

    def create_lookup_instruction(self, embedding_tensor, indices, slot_vars: List,
                                  partition_strategy: str, name: str):
        """The rows of ``embedding_tensor`` at the flat ``indices``; when trainable, the gradient
        of the loss with respect to them updates those rows on the host."""
        table = _host_value(embedding_tensor)
        if self.get_learning_rate() == 0:
            return tf.gather(table, indices)
        dummy = self._dummy_variable(embedding_tensor, name)

        @tf.custom_gradient
        def lookup(dummy_value):
            def grad(rows_grad):
                update = -rows_grad * tf.cast(self.get_learning_rate(), rows_grad.dtype)
                done = _apply_on_host(self, embedding_tensor, slot_vars, indices, update)
                with tf.control_dependencies([done]):
                    return tf.zeros_like(dummy_value)
            return tf.gather(table, indices), grad

        return lookup(tf.convert_to_tensor(dummy))

    def _dummy_variable(self, embedding_tensor, name: str):
        """The trainable scalar a trainable lookup hangs on, so that an optimizer's gradients
        reach the lookup (Graphcore's ``<name>/__dummy``; its gradient is always zero)."""
        if not tf.compat.v1.executing_eagerly_outside_functions():
            with tf.compat.v1.variable_scope(name, reuse=tf.compat.v1.AUTO_REUSE):
                return tf.compat.v1.get_variable("__dummy", shape=[], dtype=embedding_tensor.dtype,
                                                 trainable=True)
        if name not in self._eager_dummies:  # a tf.function may create a variable once only
            with tf.init_scope():
                self._eager_dummies[name] = tf.Variable(tf.zeros([], embedding_tensor.dtype),
                                                        name=f"{name}/__dummy")
        return self._eager_dummies[name]

    def create_register_instruction(self, embedding_tensor, slot_vars: List, name: str):
        """Nothing to connect on a CPU: a no-op in the table's graph (None when eager)."""
        return _no_op_beside(embedding_tensor, f"{name}_register")

    def create_deregister_instruction(self, embedding_tensor, slot_vars: List, name: str):
        """Nothing to disconnect on a CPU: a no-op in the table's graph (None when eager)."""
        return _no_op_beside(embedding_tensor, f"{name}_deregister")

    def create_slot_variables(self, embedding_tensor, name: str) -> List:
        """Plain SGD keeps no state besides the table."""
        return []

    def apply_updates(self, embedding_tensor, slot_vars: List, replica_updates: List):
        """Add each local replica's updates (``(indices, rows)`` pairs, in replica order) to the
        rows at those indices (repeated indices add up)."""
        done = []
        for indices, updates in replica_updates:
            with tf.control_dependencies(done):
                done = [tf.compat.v1.scatter_add(embedding_tensor, indices, updates)]
        return tf.group(done)


class HostEmbeddingSGDGAOptimizerSpec(HostEmbeddingOptimizerSpec):
    """SGD whose updates the host adds up over ``accumulation_factor`` mini-batches and applies
    together (lookups in between see the table as it was)."""

    def __init__(self, learning_rate: float, accumulation_factor: int) -> None:
        if accumulation_factor > 1:
            super().__init__(learning_rate, "SGD+GA")
        else:
            super().__init__(learning_rate)
        self._accumulation_factor = accumulation_factor

    def get_accumulation_factor(self) -> int:
        return self._accumulation_factor

    def create_slot_variables(self, embedding_tensor, name: str) -> List:
        """The pending updates (the table's shape) and the mini-batches counted since the last
        application."""
        if self._optimizer_name != "SGD+GA":
            return []
        with tf.init_scope(), tf.device("/device:CPU:0"):
            pending = _host_variable(tf.zeros(embedding_tensor.shape, embedding_tensor.dtype),
                                     f"{name}_pending_updates", trainable=False)
            count = _host_variable(tf.constant(0, tf.int64), f"{name}_accumulated_batches",
                                   trainable=False)
        return [pending, count]

    def apply_updates(self, embedding_tensor, slot_vars: List, replica_updates: List):
        """Add the replicas' updates to the pending ones; every ``accumulation_factor``-th
        mini-batch, add the pending updates to the table."""
        if self._optimizer_name != "SGD+GA":
            return super().apply_updates(embedding_tensor, slot_vars, replica_updates)
        pending, count = slot_vars
        added = super().apply_updates(pending, [], replica_updates)
        with tf.control_dependencies([added]):
            counted = tf.compat.v1.assign_add(count, 1)

        def apply_pending():
            applied = tf.compat.v1.assign_add(embedding_tensor, tf.convert_to_tensor(pending))
            with tf.control_dependencies([applied]):
                return tf.group(tf.compat.v1.assign(pending, tf.zeros_like(pending)))

        return tf.cond(tf.equal(counted % self._accumulation_factor, 0), apply_pending, tf.no_op)


def _no_op_beside(embedding_tensor, name: str):
    """A no-op in the graph that holds the table, as an op taking the table would be (a
    program may register while another graph is the default); None when eager."""
    if tf.executing_eagerly():
        return None
    with embedding_tensor.graph.as_default():
        return tf.no_op(name=name)


def _host_value(embedding_tensor):
    """The table's value as the device sees it: no gradient flows to the table, and a
    GradientTape does not watch it (on an IPU the device program never reads it)."""
    if isinstance(embedding_tensor, tf.Variable) and hasattr(embedding_tensor, "handle"):
        return tf.raw_ops.ReadVariableOp(resource=embedding_tensor.handle,
                                         dtype=embedding_tensor.dtype)
    return tf.stop_gradient(tf.convert_to_tensor(embedding_tensor))


def _apply_on_host(spec: HostEmbeddingOptimizerSpec, embedding_tensor, slot_vars: List,
                   indices, updates):
    """Apply one step's updates: every local replica's, in replica order, once all replicas
    have looked up (a replicated step meets here)."""
    def apply(strategy, indices, updates):
        replica_updates = list(zip(strategy.experimental_local_results(indices),
                                   strategy.experimental_local_results(updates)))
        with tf.device("/device:CPU:0"):
            done = spec.apply_updates(embedding_tensor, slot_vars, replica_updates)
        with tf.control_dependencies([done]):
            return tf.constant(0)

    context = tf.distribute.get_replica_context()
    if context is None:  # cross-replica context: one set of updates
        return apply(tf.distribute.get_strategy(), indices, updates)
    return context.merge_call(apply, args=(indices, updates))


def _host_variable(initial_value: Any, name: str, trainable: bool):
    """A variable of this process, never mirrored by a strategy whose scope is active (the host
    embedding's table lives once per host)."""
    from popdist_launcher.ipu_runtime.tf_internal import ref_variable, resource_variable_ops

    if tf.compat.v1.executing_eagerly_outside_functions():
        return resource_variable_ops.ResourceVariable(initial_value, name=name,
                                                      trainable=trainable)
    return ref_variable.RefVariable(initial_value, name=name, trainable=trainable)


class HostEmbedding:
    """A rank-2 table (tokens x encoding) held on the host, looked up with ``lookup`` inside
    the model and used within ``register(session)``."""

    def __init__(self, name: str, embedding_tensor, partition_strategy: str = "TOKEN",
                 optimizer_spec: Optional[HostEmbeddingOptimizerSpec] = None) -> None:
        if not tf.is_tensor(embedding_tensor) and not isinstance(embedding_tensor, tf.Variable):
            raise ValueError("HostEmbedding embedding_tensor is not a tensorflow tensor")
        if not isinstance(optimizer_spec, (type(None), HostEmbeddingOptimizerSpec)):
            raise ValueError("HostEmbedding optimizer_spec is not a HostEmbeddingOptimizerSpec"
                             " or None")
        if partition_strategy not in PARTITION_STRATEGIES:
            raise ValueError(f"Unknown partition strategy {partition_strategy}")
        self._name = name
        self._embedding_tensor = embedding_tensor
        self._partition_strategy = partition_strategy
        self._optimizer_spec = HostEmbeddingOptimizerSpec(0) if optimizer_spec is None \
            else optimizer_spec
        self._has_lookup = False
        self._slot_vars = self._optimizer_spec.create_slot_variables(embedding_tensor, name)

    def get_embedding_tensor(self):
        """The table (a variable on the CPU)."""
        return self._embedding_tensor

    def register(self, session=None) -> "_HostEmbeddingScope":
        """A context manager within which the session's runs use this embedding."""
        if session is None and not tf.executing_eagerly():
            raise ValueError("HostEmbedding.register requires a session when eager execution"
                             " is disabled.")
        return _HostEmbeddingScope(self, session)

    def __call__(self, *args, **kwargs):
        raise NotImplementedError("HostEmbedding.__call__ is not supported. Please use the "
                                  "context manager created with HostEmbedding.register.")

    def lookup(self, indices, clip_indices: bool = True):
        """The rows at ``indices``: shape ``indices.shape + [encoding]``. With
        ``clip_indices``, indices outside the table read its first or last row."""
        indices = tf.convert_to_tensor(indices)
        if clip_indices:
            indices = tf.clip_by_value(indices, 0, self._embedding_tensor.shape[0] - 1)
        rows = self._optimizer_spec.create_lookup_instruction(
            self._embedding_tensor, tf.reshape(indices, [-1]), self._slot_vars,
            self._partition_strategy, self._name)
        self._has_lookup = True
        width = self._embedding_tensor.shape[1]
        rows = tf.reshape(rows, tf.concat([tf.shape(indices), [width]], 0))
        return tf.ensure_shape(rows, indices.shape.concatenate([width]))


class _HostEmbeddingScope:
    """``HostEmbedding.register``'s context manager: runs the register and deregister
    instructions in the session (nothing to connect on a CPU)."""

    def __init__(self, embedding: HostEmbedding, session=None) -> None:
        self._embedding = embedding
        self._session = session

    def _run(self, instruction) -> None:
        if self._session is not None and instruction is not None:
            self._session.run(instruction)

    def __enter__(self) -> HostEmbedding:
        e = self._embedding
        self._run(e._optimizer_spec.create_register_instruction(  # noqa: SLF001
            e._embedding_tensor, e._slot_vars, e._name))  # noqa: SLF001
        return e

    def __exit__(self, exception_type, exception_value, traceback) -> None:
        e = self._embedding
        self._run(e._optimizer_spec.create_deregister_instruction(  # noqa: SLF001
            e._embedding_tensor, e._slot_vars, e._name))  # noqa: SLF001


def create_host_embedding(name: str, shape, dtype, partition_strategy: str = "TOKEN",
                          optimizer_spec: Optional[HostEmbeddingOptimizerSpec] = None,
                          initializer=None) -> HostEmbedding:
    """A HostEmbedding over a new CPU table ``name`` of ``shape``. With TensorFlow 1's behaviour
    the table is ``get_variable(name, shape, dtype, initializer)`` (its default initializer when
    None), as Graphcore's TF1 SDK makes it; with TensorFlow 2's, a variable of ``initializer``'s
    value (zeros when None), as its TF2 SDK does."""
    dtype = tf.as_dtype(dtype)
    with tf.device("/device:CPU:0"):
        if not tf.__internal__.tf2.enabled():
            table = tf.compat.v1.get_variable(name, shape=shape, dtype=dtype,
                                              initializer=initializer, use_resource=False)
        else:
            with tf.init_scope():
                if initializer is None:
                    value = tf.zeros(shape, dtype)
                elif callable(initializer):
                    value = initializer(shape, dtype=dtype)
                else:
                    value = tf.cast(initializer, dtype)
                table = _host_variable(value, name, trainable=True)
    return HostEmbedding(name, table, partition_strategy=partition_strategy,
                         optimizer_spec=optimizer_spec)
