"""cel-expr-python (the CEL C++ runtime, ``from cel_expr_python import cel``).

Its only custom values are protobuf messages: an opaque Python object is rejected
(``UNIMPLEMENTED: Unimplemented type``). So Quantity and Semver are stand-in messages built at
run time from a descriptor (``kubernetes.Quantity``: milli-units as int64 plus the text;
``kubernetes.Semver``: the three numbers plus the text), converted from the project's own
values. Quantities are compared by their milli-units, which is exact for the workload (whole
bytes) but not for every quantity (nano-units, or values past 9.2e15).

The checker is typed, but at run time cel-cpp picks an implementation by value kind only: two
overloads ``compareTo(Quantity, Quantity)`` and ``compareTo(Semver, Semver)`` with an
implementation each collide (``ALREADY_EXISTS``). The Quantity overload therefore carries one
implementation that dispatches in Python, and the Semver overload is declared for the checker.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_strings
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from bench.cel_engines.interface import CompileError, Engine, EvalError, Outcome, Program
from bench.cel_engines.workload import DeviceSpec
from extender.core.quantity import Quantity
from extender.core.semver import Semver

__all__ = ["CelExprPython"]

_NANOS_PER_MILLI = 10**6


def _message_classes() -> tuple[descriptor_pool.DescriptorPool, Any, Any]:
    """A descriptor pool with the two stand-in messages, and their Python classes."""
    field = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name="bench_k8s_cel.proto", package="kubernetes", syntax="proto3")
    quantity = file.message_type.add(name="Quantity")
    quantity.field.add(name="milli", number=1, type=field.TYPE_INT64, label=field.LABEL_OPTIONAL)
    quantity.field.add(name="text", number=2, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    version = file.message_type.add(name="Semver")
    for number, name in enumerate(("major", "minor", "patch"), 1):
        version.field.add(name=name, number=number, type=field.TYPE_INT64, label=field.LABEL_OPTIONAL)
    version.field.add(name="text", number=4, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    quantity_class = message_factory.GetMessageClass(pool.FindMessageTypeByName("kubernetes.Quantity"))
    semver_class = message_factory.GetMessageClass(pool.FindMessageTypeByName("kubernetes.Semver"))
    return pool, quantity_class, semver_class


@functools.lru_cache(maxsize=4096)
def _parsed_semver(text: str) -> Semver:
    return Semver.parse(text)


class CelExprPython(Engine):
    name = "cel-expr-python"

    def __init__(self) -> None:
        self._pool, self._quantity_class, self._semver_class = _message_classes()
        self._quantities: dict[Quantity, Any] = {}
        self._versions: dict[Semver, Any] = {}
        self._env = cel.NewEnv(
            self._pool,
            variables={"device": cel.Type.Map(cel.Type.STRING, cel.Type.DYN)},
            functions=self._functions(),
            # cel-cpp's own strings extension (lowerAscii, split, ...), as Kubernetes has.
            extensions=[ext_strings.ExtStrings()],
        )

    def _functions(self) -> list[Any]:
        t, overload, declare = cel.Type, cel.Overload, cel.FunctionDecl
        quantity_type, semver_type = t("kubernetes.Quantity"), t("kubernetes.Semver")
        compare = self._compare

        def member(name: str, result: Any, impl: Any) -> list[Any]:
            """The Quantity overload with the implementation, the Semver one for the checker."""
            return [
                overload(f"quantity_{name}", result, [quantity_type, quantity_type], is_member=True, impl=impl),
                overload(f"semver_{name}", result, [semver_type, semver_type], is_member=True),
            ]

        return [
            declare("quantity", [overload("quantity_string", quantity_type, [t.STRING], impl=self._quantity)]),
            declare("semver", [overload("semver_string", semver_type, [t.STRING], impl=self._semver)]),
            declare("compareTo", member("compareTo", t.INT, compare)),
            declare("isGreaterThan", member("isGreaterThan", t.BOOL, lambda a, b: compare(a, b) > 0)),
            declare("isLessThan", member("isLessThan", t.BOOL, lambda a, b: compare(a, b) < 0)),
            declare(
                "asApproximateFloat",
                [
                    overload(
                        "quantity_asApproximateFloat",
                        t.DOUBLE,
                        [quantity_type],
                        is_member=True,
                        impl=lambda q: q.milli / 1000.0,
                    )
                ],
            ),
            declare("major", [overload("semver_major", t.INT, [semver_type], is_member=True, impl=lambda v: v.major)]),
        ]

    def _quantity(self, text: str) -> Any:
        return self._quantity_message(Quantity.parse(text), text)  # a parse error becomes a CEL error

    def _semver(self, text: str) -> Any:
        return self._semver_message(Semver.parse(text))

    def _compare(self, left: Any, right: Any) -> int:
        kind = type(left)
        if kind is not type(right):
            raise TypeError("no such overload")
        if kind is self._quantity_class:
            return int((left.milli > right.milli) - (left.milli < right.milli))
        return _parsed_semver(left.text).compare(_parsed_semver(right.text))

    def _quantity_message(self, value: Quantity, text: str) -> Any:
        return self._quantity_class(milli=value.nanos // _NANOS_PER_MILLI, text=text)

    def _semver_message(self, value: Semver) -> Any:
        return self._semver_class(major=value.major, minor=value.minor, patch=value.patch, text=str(value))

    def compile(self, expression: str) -> Program:
        try:
            return _CxpProgram(self._env.compile(expression))
        except Exception as exc:
            raise CompileError(str(exc)) from None

    def view(self, device: DeviceSpec) -> Any:
        """Plain dicts in an ``Activation``; the engine converts them on first access."""
        attributes = {name: self._attribute(value) for name, value in device.attributes.items()}
        capacity = {name: self._capacity(value) for name, value in device.capacity.items()}
        fields = {
            "driver": device.driver,
            "attributes": {device.driver: attributes},
            "capacity": {device.driver: capacity},
            "allowMultipleAllocations": device.allow_multiple_allocations,
        }
        return self._env.Activation({"device": fields})

    def _attribute(self, value: object) -> Any:
        if isinstance(value, Semver):
            message = self._versions.get(value)
            if message is None:
                message = self._versions[value] = self._semver_message(value)
            return message
        return value

    def _capacity(self, value: Quantity) -> Any:
        message = self._quantities.get(value)
        if message is None:
            message = self._quantities[value] = self._quantity_message(value, str(value))
        return message


_MISSING_KEY = re.compile(r'Key not found in map : "([^"]*)"')


class _CxpProgram(Program):
    __slots__ = ("_expression",)

    def __init__(self, expression: Any) -> None:
        self._expression = expression

    def evaluate(self, view: Any) -> Outcome:
        try:
            value = self._expression.eval(view)
        except Exception as exc:  # e.g. "Iteration budget exceeded" is raised, not returned
            return EvalError(f"internal error: {exc}", repr(exc))
        result = value.value()
        if result is True or result is False:
            return result
        kind = value.type().name()
        if kind == "ERROR":
            text = str(result)
            found = _MISSING_KEY.search(text)
            return EvalError(f"no such key: {found.group(1)}" if found else text, text)
        return EvalError(f"result is not bool: {kind}")
