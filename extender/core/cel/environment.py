"""The environment a selector compiles in: its one variable (``device``), the functions it may
call (ours layered over celpy's built-ins), the namespaces (``optional``, ``strings``, ``sets``)
and the type identifiers it may name.

Library functions are module-level named functions, not lambdas or closures: celpy's transpiler
writes a call as ``<module>.<qualname>(...)``, which ``celpy_glue`` maps to a global of the
compiled program.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from extender.core.cel import lib_kubernetes as k8s
from extender.core.cel import lib_lists as lists
from extender.core.cel import lib_optional as opt
from extender.core.cel import lib_strings as strings
from extender.core.cel import operators as ops
from extender.core.cel.celpy_glue import builtin_names
from extender.core.cel.values import OPTIONAL_NAMESPACE, SETS_NAMESPACE, STRINGS_NAMESPACE, Namespace

__all__ = [
    "DEVICE_FIELDS",
    "FOLDABLE",
    "FUNCTIONS",
    "GLOBAL_NAMESPACES",
    "KNOWN_FUNCTIONS",
    "NAMESPACE_FUNCTIONS",
    "TYPE_IDENTS",
]

#: CEL function name -> implementation, layered over celpy's built-ins.
FUNCTIONS: dict[str, Callable[..., Any]] = {
    "!_": ops.logical_not,
    "_==_": ops.equal,
    "_!=_": ops.not_equal,
    "_in_": ops.contained_in,
    "_+_": ops.plus,
    "_-_": ops.minus,
    "_<_": ops.less,
    "_<=_": ops.less_equal,
    "_>_": ops.greater,
    "_>=_": ops.greater_equal,
    # quantity
    "quantity": k8s.quantity,
    "isQuantity": k8s.isQuantity,
    "sign": k8s.sign,
    "isInteger": k8s.isInteger,
    "asInteger": k8s.asInteger,
    "asApproximateFloat": k8s.asApproximateFloat,
    "add": k8s.add,
    "sub": k8s.sub,
    # semver
    "semver": k8s.semver,
    "isSemver": k8s.isSemver,
    "major": k8s.major,
    "minor": k8s.minor,
    "patch": k8s.patch,
    # both
    "compareTo": k8s.compareTo,
    "isGreaterThan": k8s.isGreaterThan,
    "isLessThan": k8s.isLessThan,
    # strings
    "charAt": strings.charAt,
    "indexOf": strings.indexOf,
    "lastIndexOf": strings.lastIndexOf,
    "lowerAscii": strings.lowerAscii,
    "upperAscii": strings.upperAscii,
    "replace": strings.replace,
    "split": strings.split,
    "substring": strings.substring,
    "trim": strings.trim,
    "join": strings.join,
    "reverse": strings.reverse,
    "format": strings.format,
    "quote": strings.quote,
    # lists, regex, sets
    "isSorted": lists.isSorted,
    "sum": lists.sum,
    "find": lists.find,
    "findAll": lists.findAll,
    "matches": lists.matches,
    "contains": lists.contains,
    "equivalent": lists.equivalent,
    "intersects": lists.intersects,
    "includes": lists.includes,
    # optional
    "of": opt.of,
    "none": opt.none,
    "ofNonZeroValue": opt.ofNonZeroValue,
    "hasValue": opt.hasValue,
    "value": opt.value,
    "orValue": opt.orValue,
    "or": opt.optional_or,
    "__optsel__": opt.optional_select,
    "__optindex__": opt.optional_index,
}
#: Functions worth calling at compile time when their only argument is a literal.
FOLDABLE = frozenset({"quantity", "semver"})

#: Names resolvable in every expression besides its variables.
GLOBAL_NAMESPACES: dict[str, Namespace] = {
    "optional": OPTIONAL_NAMESPACE,
    "strings": STRINGS_NAMESPACE,
    "sets": SETS_NAMESPACE,
}
#: namespace -> functions that may be called on it.
NAMESPACE_FUNCTIONS: dict[str, frozenset[str]] = {
    "optional": frozenset({"of", "none", "ofNonZeroValue"}),
    "strings": frozenset({"quote"}),
    "sets": frozenset({"contains", "equivalent", "intersects"}),
}

#: Type names usable as values (``type(x) == string``).
TYPE_IDENTS = frozenset(
    {"bool", "bytes", "double", "duration", "int", "list", "map", "null_type", "string", "timestamp", "type", "uint"}
)
_NAMESPACE_ONLY = frozenset().union(*NAMESPACE_FUNCTIONS.values()) - {"contains"}
#: Functions a selector may call by name or as a method.
KNOWN_FUNCTIONS = (
    frozenset(name for name in (*builtin_names(), *FUNCTIONS) if not name.startswith("_") or name.startswith("__"))
    - _NAMESPACE_ONLY
    - {"!_", "-_", "list", "map", "null_type"}
)
#: The fields of ``device`` (``allowMultipleAllocations`` only with consumable capacity).
DEVICE_FIELDS = frozenset({"driver", "attributes", "capacity"})
