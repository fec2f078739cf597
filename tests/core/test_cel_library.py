"""The Kubernetes CEL function library (extender.core.cel_library), exercised through real selectors.

Covers the quantity, semver, ext.Strings, Lists/Regex/sets helpers and optional values with
examples derived from the upstream library documentation, plus type-mismatch errors. The device
view, caches and compile checks are in test_cel.py.
"""

from __future__ import annotations

import pytest

from extender.core.cel import CelCompileError, CelRuntimeError, SelectorCache
from extender.core.model import Device, PoolRef, ResourceSlice


def _slice() -> ResourceSlice:
    return ResourceSlice(
        name="slice-1", driver="driver-a", pool=PoolRef("pool-1", 1, 1), devices=(Device(name="device-1"),)
    )


SLICE = _slice()


def evaluate(expression: str) -> bool | CelRuntimeError:
    (outcome,) = SelectorCache().results(expression, SLICE)
    return outcome


def error_of(expression: str) -> str:
    outcome = evaluate(expression)
    assert isinstance(outcome, CelRuntimeError), outcome
    return outcome.message


TRUE_EXPRESSIONS = [
    # quantity
    'quantity("1.5Gi").compareTo(quantity("1536Mi")) == 0',
    'quantity("50k").isGreaterThan(quantity("100"))',
    'quantity("50M").isLessThan(quantity("100M"))',
    'quantity("100m").compareTo(quantity("1")) == -1',
    'quantity("2").compareTo(quantity("1")) == 1',
    'isQuantity("1.3G") && isQuantity("1.3Gi") && !isQuantity("1,3G") && !isQuantity("10000k0")',
    'quantity("50k").add(quantity("20k")) == quantity("70k")',
    'quantity("50k").add(20) == quantity("50020")',
    'quantity("50k").sub(quantity("20k")) == quantity("30k")',
    'quantity("50k").sub(20) == quantity("49980")',
    'quantity("50.703k").sub(quantity("20.3k")) == quantity("30.403k")',
    'quantity("50k").asInteger() == 50000',
    'quantity("1.5").asApproximateFloat() == 1.5',
    'quantity("50k").isInteger() && !quantity("9999999999999999999999999999999999999G").isInteger()',
    '!quantity("50m").isInteger()',
    'quantity("-10").sign() == -1 && quantity("0").sign() == 0 && quantity("10Mi").sign() == 1',
    # semver
    'semver("1.2.3").major() == 1 && semver("1.2.3").minor() == 2 && semver("1.2.3").patch() == 3',
    'semver("1.0.0").isLessThan(semver("1.1.0"))',
    'semver("1.0.0-alpha").isLessThan(semver("1.0.0"))',
    'semver("1.0.0-alpha").isLessThan(semver("1.0.0-alpha.1"))',
    'semver("2.0.0").isGreaterThan(semver("1.99.99"))',
    'semver("1.2.3").compareTo(semver("1.2.3")) == 0 && semver("1.2.4").compareTo(semver("1.2.3")) == 1',
    'isSemver("1.0.0") && !isSemver("v1.0") && !isSemver("1.0")',
    'isSemver("v1.0", true) && semver("v1.0", true) == semver("1.0.0")',
    'semver("1.0.0") == semver("1.0.0")',
    # strings
    '"hello".charAt(1) == "e" && "hello".charAt(5) == ""',
    '"hello mellow".indexOf("ello") == 1 && "hello mellow".indexOf("ello", 6) == 7',
    '"hello".indexOf("") == 0 && "hello".indexOf("x") == -1',
    '"hello mellow".lastIndexOf("ello") == 7 && "hello mellow".lastIndexOf("ello", 6) == 1',
    '"TacoCat".lowerAscii() == "tacocat" && "TacoCÆt".lowerAscii() == "tacocÆt"',
    '"TacoCat".upperAscii() == "TACOCAT"',
    '"hello hello".replace("he", "we") == "wello wello"',
    '"hello hello".replace("he", "we", 1) == "wello hello"',
    '"hello hello".replace("he", "we", 0) == "hello hello"',
    '"hello hello".split(" ") == ["hello", "hello"]',
    '"hello hello hello".split(" ", 2) == ["hello", "hello hello"]',
    '"hello hello".split(" ", 0) == []',
    '"tacocat".substring(4) == "cat" && "tacocat".substring(0, 4) == "taco"',
    '"  \\ttrim\\n    ".trim() == "trim"',
    '["hello", "mellow"].join() == "hellomellow" && ["hello", "mellow"].join(" ") == "hello mellow"',
    '[].join(",") == ""',
    '"gums".reverse() == "smug"',
    'strings.quote("single-quote with \\"double quote\\"") == "\\"single-quote with \\\\\\"double quote\\\\\\"\\""',
    '"%s-%d".format(["gpu", 3]) == "gpu-3"',
    '"%.2f".format([1.2345]) == "1.23"',
    '"%x".format([255]) == "ff" && "%%".format([]) == "%"',
    '"gpu-0".startsWith("gpu") && "gpu-0".endsWith("-0") && "gpu-0".contains("u-")',
    '"gpu-12".matches("^gpu-[0-9]+$")',
    '"abc 123".find("[0-9]+") == "123" && "a1b22".findAll("[0-9]+") == ["1", "22"]',
    # lists, sets
    "[1, 2, 3].isSorted() && ![3, 1].isSorted()",
    "[1, 2, 3].sum() == 6 && [].sum() == 0",
    "[1, 2, 3, 2].indexOf(2) == 1 && [1, 2, 3, 2].lastIndexOf(2) == 3 && [1].indexOf(9) == -1",
    "sets.contains([1, 2, 3], [2, 3]) && !sets.contains([1], [2])",
    "sets.equivalent([1, 2], [2, 1, 1]) && sets.intersects([1, 2], [2, 5])",
    '["a", "b"].reverse() == ["b", "a"]',
    # optional values
    "optional.of(1).hasValue() && !optional.none().hasValue()",
    "optional.of(1).value() == 1 && optional.none().orValue(5) == 5",
    "optional.none().or(optional.of(2)).value() == 2",
    '!optional.ofNonZeroValue("").hasValue() && optional.ofNonZeroValue("x").hasValue()',
    '{"a": 1}.?a.orValue(0) == 1 && {"a": 1}.?b.orValue(0) == 0',
    '{"a": {"b": 2}}.?a.b.orValue(0) == 2 && {"a": {"b": 2}}.?x.b.orValue(0) == 0',
    "[10, 20][?1].orValue(0) == 20 && [10, 20][?5].orValue(0) == 0",
    '{"k": "v"}[?"k"].hasValue()',
    # cel.bind and macros
    "cel.bind(x, 5, x * x == 25)",
    'cel.bind(a, "gpu", cel.bind(b, a + "-0", b == "gpu-0"))',
    "[1, 2, 3].all(x, x > 0) && [1, 2, 3].exists(x, x == 2) && [1, 2, 3].exists_one(x, x > 2)",
    "[1, 2, 3].map(x, x * 2) == [2, 4, 6] && [1, 2, 3].filter(x, x > 1) == [2, 3]",
    '{"a": 1, "b": 2}.all(k, k in ["a", "b"])',
    # operators and error absorption
    "1 / 0 == 1 || true",
    "!(1 / 0 == 1 && false)",
    "true ? true : 1 / 0 == 1",
    "1 < 1.5 || true",
    # heterogeneous equality: other types are unequal, numbers compare by value
    '!(1 == "a") && 1 != "a" && 1 == 1.0 && 2u == 2 && 1 in [1.0]',
]


@pytest.mark.parametrize("expression", TRUE_EXPRESSIONS)
def test_library_examples_hold(expression: str) -> None:
    assert evaluate(expression) is True


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        # one compareTo serves both types: mixing them has no overload
        ('quantity("1").compareTo(semver("1.0.0")) == 0', "no such overload"),
        ('semver("1.0.0").isGreaterThan(quantity("1"))', "no such overload"),
        ('quantity("1").add("2") == quantity("3")', "no such overload"),
        ('quantity("1").major() == 1', "no such overload"),
        # Quantity and Semver have no ordering operators or +, as upstream
        ('quantity("1") < quantity("2")', "no such overload"),
        ('semver("1.0.0") > semver("0.1.0")', "no such overload"),
        ('quantity("1") + quantity("2") == quantity("3")', "no such overload"),
        ('quantity("0.5").asInteger() == 0', "cannot convert value to integer"),
        ('quantity("1E20").asInteger() == 0', "cannot convert value to integer"),
        ('"abc".charAt(4) == ""', "index out of range: 4"),
        ('"abc".substring(2, 1) == ""', "invalid substring range. start: 2, end: 1"),
        ("optional.none().value() == 1", "optional.none() dereference"),
        ("1 / 0 == 1", "division by zero"),
        ('{"a": 1}["b"] == 1', "no such key: b"),
        ('{"a": 1}.b == 1', "no such key: b"),
        ("[1, 0].exists_one(x, 1 / x == 1)", "division by zero"),
        ("9223372036854775807 + 1 > 0", "integer overflow"),
    ],
)
def test_library_errors(expression: str, message: str) -> None:
    assert error_of(expression) == message


def test_invalid_quantity_is_a_runtime_error_naming_the_text() -> None:
    message = error_of('quantity("1,3G").sign() == 1')
    assert message
    assert message != "no such overload"


def test_invalid_semver_is_a_runtime_error() -> None:
    message = error_of('semver("v1.0").major() == 1')
    assert message
    assert message != "no such overload"


def test_cost_limit_stops_runaway_comprehensions() -> None:
    ten = "[" + ", ".join(str(i) for i in range(100)) + "]"
    expression = f"{ten}.all(a, {ten}.all(b, {ten}.all(c, a + b + c >= 0)))"  # 1e6 iterations
    assert error_of(expression) == "operation cancelled: actual cost limit exceeded"


def test_cost_limit_is_not_absorbed_by_or() -> None:
    ten = "[" + ", ".join(str(i) for i in range(100)) + "]"
    expression = f"true || {ten}.all(a, {ten}.all(b, {ten}.all(c, true)))"
    assert evaluate(expression) is True  # short-circuit: the right side never runs
    expression = f"{ten}.all(a, {ten}.all(b, {ten}.all(c, true))) || true"
    assert error_of(expression) == "operation cancelled: actual cost limit exceeded"


def test_cost_limit_catches_string_doubling() -> None:
    # 30 nested doublings would build a 1 GiB string; the size charge stops it early.
    expression = (
        'cel.bind(s0, "xxxxxxxxxx", '
        + "".join(f"cel.bind(s{i}, s{i - 1} + s{i - 1}, " for i in range(1, 31))
        + "size(s30) > 0"
        + ")" * 31
    )
    assert error_of(expression) == "operation cancelled: actual cost limit exceeded"


def test_optional_literal_entries_are_rejected_with_a_clear_message() -> None:
    with pytest.raises(CelCompileError, match=r"optional list elements \(\[\?x\]\) are not supported"):
        SelectorCache().compile("[?optional.none()] == []")
    with pytest.raises(CelCompileError, match=r"optional entries in list or map literals"):
        SelectorCache().compile('{?"a": optional.none()} == {}')
    with pytest.raises(CelCompileError, match=r"optional entries in list or map literals"):
        SelectorCache().compile("[1, ?optional.none()] == [1]")


def test_question_marks_inside_strings_are_not_optional_syntax() -> None:
    assert evaluate('"a.?b[?c]" == "a.?b" + "[?c]"') is True
    assert evaluate("true ? true : false") is True
