"""NumPy 1.x names for IPU programs: the names NumPy 2 removed from its main namespace (NEP 52,
the NumPy 2.0 migration guide, and those NumPy 2.x removed since) and the aliases of Python's
types NumPy 1.24 removed, answered as their NumPy 2 equivalents with NumPy's own semantics.

``install`` runs on NumPy once the program is an IPU program (the import table's
``ipu-program`` switch): it wraps the module's own ``__getattr__``, which NumPy calls only for
names it lacks, so every name NumPy has is untouched and nothing changes for other programs.
Names NumPy still has (``np.bool``, ``np.long``, which NumPy 2 gave new meanings) stay NumPy's.
"""
from __future__ import annotations

import builtins

# name -> the NumPy 2 name (a dotted path below ``numpy``) it is
RENAMED = {
    # constants
    "Inf": "inf", "Infinity": "inf", "infty": "inf", "PINF": "inf", "NaN": "nan",
    # scalar types
    "float_": "float64", "complex_": "complex128", "cfloat": "complex128",
    "singlecomplex": "complex64", "longfloat": "longdouble", "longcomplex": "clongdouble",
    "clongfloat": "clongdouble", "string_": "bytes_", "unicode_": "str_", "int0": "intp",
    "uint0": "uintp", "bool8": "bool_", "object0": "object_", "str0": "str_", "bytes0": "bytes_",
    "void0": "void",
    # functions under their NumPy 2 names
    "product": "prod", "cumproduct": "cumprod", "alltrue": "all", "sometrue": "any",
    "round_": "round", "mat": "asmatrix", "row_stack": "vstack", "trapz": "trapezoid",
    # still in NumPy 2, elsewhere
    "add_newdoc": "lib.add_newdoc", "add_docstring": "lib.add_docstring",
    "byte_bounds": "lib.array_utils.byte_bounds", "DataSource": "lib.npyio.DataSource",
    "compare_chararrays": "char.compare_chararrays", "format_parser": "rec.format_parser",
    "tracemalloc_domain": "lib.tracemalloc_domain",
}
# The aliases of Python's own types NumPy 1.24 removed (``np.float`` was ``float``); NumPy 2
# has ``bool`` and ``long`` again, as its own types, and answers them itself.
PYTHON_TYPES = {"float": "float", "int": "int", "object": "object", "str": "str",
                "complex": "complex", "unicode": "str", "bool": "bool", "long": "int"}
CONSTANTS = {"NINF": float("-inf"), "PZERO": 0.0, "NZERO": -0.0}
# name -> the function of this module that builds it from numpy
BUILT = ("cast", "asfarray", "find_common_type", "in1d", "msort", "issubclass_", "safe_eval",
         "fastCopyAndTranspose", "sctypes", "obj2sctype", "sctype2char", "issctype",
         "issubsctype", "maximum_sctype", "nbytes")


def names() -> list:
    """Every name ``install`` answers."""
    return sorted({*RENAMED, *PYTHON_TYPES, *CONSTANTS, *BUILT})


def install(numpy) -> None:
    """Answer the NumPy 1.x names in ``numpy`` (once)."""
    previous = numpy.__dict__.get("__getattr__")
    if getattr(previous, "numpy1_names", False):
        return
    built: dict = {}

    def __getattr__(name):  # noqa: N807 (the module's hook)
        if name in built:
            return built[name]
        value = _value(numpy, name)
        if value is not _MISSING:
            built[name] = value
            return value
        if previous is not None:
            return previous(name)
        raise AttributeError(f"module 'numpy' has no attribute {name!r}")

    __getattr__.numpy1_names = True
    numpy.__getattr__ = __getattr__


_MISSING = object()


def _value(numpy, name: str):
    if name in RENAMED:
        value = numpy
        for part in RENAMED[name].split("."):
            value = getattr(value, part, _MISSING)
            if value is _MISSING:
                return _MISSING
        return value
    if name in PYTHON_TYPES:
        return getattr(builtins, PYTHON_TYPES[name])
    if name in CONSTANTS:
        return CONSTANTS[name]
    if name in BUILT:
        return globals()[f"_{name}"](numpy)
    return _MISSING


# -- the names built from NumPy 2's functions

class _Cast(dict):
    """``np.cast[dtype](x)``: ``x`` as an array of ``dtype`` (NumPy 1.x's ``np.cast``)."""

    def __init__(self, numpy) -> None:
        super().__init__()
        self._numpy = numpy

    def __missing__(self, key):
        numpy = self._numpy
        dtype = numpy.dtype(key).type

        def cast(x):
            return numpy.asarray(x).astype(dtype)
        self[key] = cast
        return cast


def _cast(numpy):
    return _Cast(numpy)


def _asfarray(numpy):
    def asfarray(a, dtype=numpy.float64):
        """``a`` as a floating-point array (``dtype`` if it is inexact, else float64)."""
        if not numpy.issubdtype(dtype, numpy.inexact):
            dtype = numpy.float64
        return numpy.asarray(a, dtype=dtype)
    return asfarray


_KIND_RANK = {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3}


def _find_common_type(numpy):
    def find_common_type(array_types, scalar_types):
        """The type arrays of ``array_types`` and scalars of ``scalar_types`` combine to: the
        arrays' common type, unless the scalars' common type is of a higher kind (boolean,
        integer, floating, complex), which then wins."""
        arrays = [numpy.dtype(t) for t in array_types]
        scalars = [numpy.dtype(t) for t in scalar_types]
        array = numpy.result_type(*arrays) if arrays else None
        scalar = numpy.result_type(*scalars) if scalars else None
        if array is None or scalar is None:
            return scalar if array is None else array
        if array.kind not in _KIND_RANK or scalar.kind not in _KIND_RANK:
            return None
        if _KIND_RANK[scalar.kind] > _KIND_RANK[array.kind]:
            return numpy.promote_types(scalar, array)
        return array
    return find_common_type


def _in1d(numpy):
    def in1d(ar1, ar2, assume_unique=False, invert=False, *, kind=None):
        """Whether each element of ``ar1``, flattened, is in ``ar2`` (``np.isin`` flattened)."""
        return numpy.isin(numpy.asarray(ar1).ravel(), ar2, assume_unique=assume_unique,
                          invert=invert, kind=kind)
    return in1d


def _msort(numpy):
    def msort(a):
        """A copy of ``a`` sorted along its first axis."""
        return numpy.sort(a, axis=0)
    return msort


def _issubclass_(numpy):
    def issubclass_(arg1, arg2):
        """``issubclass`` that answers False, not TypeError, for a first argument that is no
        class."""
        try:
            return issubclass(arg1, arg2)
        except TypeError:
            return False
    return issubclass_


def _safe_eval(numpy):
    import ast
    return ast.literal_eval


def _fastCopyAndTranspose(numpy):  # noqa: N802 (NumPy's name)
    def fastCopyAndTranspose(a):  # noqa: N802
        """A transposed copy of ``a``."""
        return numpy.asarray(a).T.copy()
    return fastCopyAndTranspose


def _sctypes(numpy):
    return {"int": [numpy.int8, numpy.int16, numpy.int32, numpy.int64],
            "uint": [numpy.uint8, numpy.uint16, numpy.uint32, numpy.uint64],
            "float": [numpy.float16, numpy.float32, numpy.float64, numpy.longdouble],
            "complex": [numpy.complex64, numpy.complex128, numpy.clongdouble],
            "others": [bool, object, bytes, str, numpy.void]}


def _obj2sctype(numpy):
    def obj2sctype(rep, default=None):
        """The NumPy scalar type of ``rep`` (a type, dtype, array or name), else ``default``."""
        if isinstance(rep, type) and issubclass(rep, numpy.generic):
            return rep
        if isinstance(rep, numpy.ndarray):
            return rep.dtype.type
        try:
            return numpy.dtype(rep).type
        except (TypeError, ValueError):
            return default
    return obj2sctype


def _sctype2char(numpy):
    def sctype2char(sctype):
        """The character code of a scalar type."""
        found = _obj2sctype(numpy)(sctype)
        if found is None:
            raise ValueError("unrecognized type")
        return numpy.dtype(found).char
    return sctype2char


def _issctype(numpy):
    def issctype(rep):
        """Whether ``rep`` is a NumPy scalar type (or a dtype of one other than object)."""
        if not isinstance(rep, (type, numpy.dtype)):
            return False
        found = _obj2sctype(numpy)(rep)
        return found is not None and found is not numpy.object_
    return issctype


def _issubsctype(numpy):
    def issubsctype(arg1, arg2):
        """Whether the scalar type of ``arg1`` is a subclass of that of ``arg2``."""
        obj2sctype = _obj2sctype(numpy)
        return issubclass(obj2sctype(arg1), obj2sctype(arg2))
    return issubsctype


def _maximum_sctype(numpy):
    def maximum_sctype(t):
        """The scalar type of the highest precision of ``t``'s kind."""
        found = _obj2sctype(numpy)(t)
        if found is None:
            return t
        for group in _sctypes(numpy).values():
            if found in group:
                return group[-1]
        return found
    return maximum_sctype


class _ItemSizes(dict):
    """``np.nbytes[dtype]``: the size in bytes of one item of ``dtype``."""

    def __init__(self, numpy) -> None:
        super().__init__()
        self._numpy = numpy

    def __missing__(self, key):
        self[key] = size = self._numpy.dtype(key).itemsize
        return size


def _nbytes(numpy):
    return _ItemSizes(numpy)
