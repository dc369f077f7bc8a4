"""The variables of a replicated ``ipu_compiler.compile`` program (TF1 graphs): every replica
has its own copy of each resource variable the program reads or writes, as each IPU replica
has, so an optimizer step of one replica changes only its own copy. Replica 0 uses the
variable itself, so the host reads replica 0's values (Graphcore's executor reads variables
back from replica 0); replica r > 0 uses a copy that is set from the variable when a run of the
program starts, before any replica writes.

Variables the program creates are created once: replica 0's build creates them (the first
build of the program records those it creates directly, with ``tf.Variable``); the other
replicas, and replica 0 again when the program is rebuilt for another replica count, get the
same variables, by name through ``get_variable`` (each build opens the same variable scopes,
named as in the first build) and in creation order for the others.
"""
from __future__ import annotations

import contextlib
import contextvars
import logging
from typing import Iterator, List, Optional

import tensorflow as tf

from popdist_launcher.ipu_runtime.tf_internal import (gen_resource_variable_ops as resource_ops,
                                                      resource_variable_ops)

log = logging.getLogger(__name__)
# The replica r > 0 being built, whose copies variable handles give (None: no such build).
_REDIRECT: contextvars.ContextVar = contextvars.ContextVar("ipu_replica_copies", default=None)


class ReplicaVariables:
    """The variables of one replica's build of a program.

    ``reference``: the variables the program's first build created directly (None when this is
    that build, which records them in ``created``). ``prologue``: the op every replica's work
    waits for, which copies the variables into the replica's own copies (None for replica 0,
    which uses the variables themselves)."""

    def __init__(self, replica: int, reference: Optional[list], prologue=None) -> None:
        self._replica = replica
        self._reference = reference
        self._prologue = prologue
        self.created: List = []
        self._direct = 0  # variables created directly so far (not through get_variable)
        self._in_get_variable = 0
        self._first_op = None  # ops from this id on were made by this build
        self._copies = {}  # a variable's handle -> this replica's copy of it

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        """Build the replica's copy of the program in this scope."""
        made = tf.compat.v1.get_default_graph().get_operations()
        # op ids grow as ops are made: those from here on are this build's
        self._first_op = max((op._id for op in made), default=-1) + 1  # noqa: SLF001
        reuse = tf.compat.v1.AUTO_REUSE if self._reference is not None else None
        with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(),
                                         custom_getter=self._get_variable, reuse=reuse,
                                         auxiliary_name_scope=False), \
                tf.compat.v1.variable_creator_scope(self._create):
            if self._prologue is None:
                yield
                return
            install_handle_redirect()
            token = _REDIRECT.set(self)
            try:
                yield
            finally:
                _REDIRECT.reset(token)

    def _get_variable(self, getter, name, *args, **kwargs):
        self._in_get_variable += 1
        try:
            return getter(name, *args, **kwargs)
        finally:
            self._in_get_variable -= 1

    def _create(self, next_creator, **kwargs):
        if self._in_get_variable:
            return next_creator(**kwargs)
        if self._reference is None:
            variable = next_creator(**kwargs)
            self.created.append(variable)
            return variable
        index = self._direct
        self._direct += 1
        if index < len(self._reference):
            return self._reference[index]
        log.warning("Replica %d of an IPU program created a variable its first build did not "
                    "(%s); it gets a variable of its own.", self._replica, kwargs.get("name"))
        return next_creator(**kwargs)

    def handle_for(self, variable, handle):
        """The handle replica ``self`` uses for ``variable`` (whose own handle is ``handle``)."""
        if not isinstance(handle, tf.Tensor) or not hasattr(handle, "graph") or \
                handle.graph is not self._prologue.graph or handle.op._id >= self._first_op:  # noqa: SLF001
            return handle  # made by this replica's build: its own
        key = handle.ref()
        copy = self._copies.get(key)
        if copy is None:
            copy = self._copies[key] = self._copy(variable, handle)
        return copy

    def _copy(self, variable, handle):
        graph = handle.graph
        dtype = variable.dtype.base_dtype
        name = graph.unique_name(f"{handle.op.name}/replica_{self._replica}")
        with tf.init_scope(), graph.as_default(), tf.compat.v1.name_scope(None), \
                tf.device(handle.device):
            copy = resource_ops.var_handle_op(dtype=dtype, shape=variable.shape,
                                              shared_name=name, name=name.rsplit("/", 1)[-1])
            value = resource_ops.read_variable_op(handle, dtype)
            assign = resource_ops.assign_variable_op(copy, value)
        self._prologue._add_control_inputs([assign])  # noqa: SLF001
        return copy


def install_handle_redirect() -> None:
    """Resource variables' ``handle`` gives the copy of the replica being built (once per
    process; outside a replicated build it is the variable's own handle)."""
    cls = resource_variable_ops.BaseResourceVariable
    stock = cls.handle
    if getattr(stock.fget, "_replica_copies", False):
        return

    def handle(variable):
        own = stock.fget(variable)
        replica = _REDIRECT.get()
        return own if replica is None else replica.handle_for(variable, own)

    handle._replica_copies = True
    cls.handle = property(handle, doc=stock.__doc__)
