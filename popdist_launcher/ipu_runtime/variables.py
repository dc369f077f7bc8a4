"""The distributed variables the strategies make, as Graphcore's classes: ``IPUMirroredVariable``
(synchronised on write), ``IPUSyncOnReadVariable`` (reduced when read) and
``IPUDistributedVariable``, TensorFlow's classes with nothing added, which Graphcore's programs
and tests check with ``isinstance``; the policy classes and the two mappings of Graphcore's
module. ``as_ipu_variable`` gives a variable a strategy made its IPU class."""
from __future__ import annotations

from popdist_launcher.ipu_runtime.tf_internal import values_lib, variable_scope


class IPUDistributedVariable(values_lib.DistributedVariable):
    """A distributed variable of an IPU strategy."""


class IPUSyncOnReadVariable(values_lib.SyncOnReadVariable):
    """A variable of an IPU strategy that is reduced (SUM or MEAN) when read across replicas:
    metrics, batch-normalisation moving statistics."""


class IPUMirroredVariable(values_lib.MirroredVariable):
    """A variable of an IPU strategy that every replica holds the same value of."""


class IPUOnWritePolicy(values_lib.OnWritePolicy):
    """The on-write policy of an IPU strategy's policy-based variables."""


class IPUOnReadPolicy(values_lib.OnReadPolicy):
    """The on-read policy of an IPU strategy's policy-based variables."""


IPU_VARIABLE_CLASS_MAPPING = {
    "VariableClass": IPUDistributedVariable,
    variable_scope.VariableSynchronization.ON_WRITE: IPUMirroredVariable,
    variable_scope.VariableSynchronization.ON_READ: IPUSyncOnReadVariable,
}
IPU_VARIABLE_POLICY_MAPPING = {
    variable_scope.VariableSynchronization.ON_WRITE: IPUOnWritePolicy,
    variable_scope.VariableSynchronization.ON_READ: IPUOnReadPolicy,
}
_IPU_CLASS = {values_lib.MirroredVariable: IPUMirroredVariable,
              values_lib.SyncOnReadVariable: IPUSyncOnReadVariable,
              values_lib.DistributedVariable: IPUDistributedVariable}

NAMES = ("IPUDistributedVariable", "IPUMirroredVariable", "IPUSyncOnReadVariable",
         "IPUOnWritePolicy", "IPUOnReadPolicy", "IPU_VARIABLE_CLASS_MAPPING",
         "IPU_VARIABLE_POLICY_MAPPING")


def as_ipu_variable(variable):
    """``variable`` with its IPU class where it is one of TensorFlow's distributed variable
    classes (the subclasses add nothing, so the object is unchanged but for its type)."""
    ipu_class = _IPU_CLASS.get(type(variable))
    if ipu_class is not None:
        variable.__class__ = ipu_class
    return variable
