"""The CEL selector engine (extender.core.cel): the ``device`` view, compile checks, runtime
errors, the result/program/view caches and the ``device.driver == "..."`` fast path.

Library functions are covered in test_cel_library.py; how the allocator reports the errors is
the allocator's tests' business.
"""

from __future__ import annotations

import pytest

from extender.core.cel import CelCompileError, CelRuntimeError, SelectorCache
from extender.core.model import (
    Device,
    DeviceCapacity,
    PoolRef,
    ResourceSlice,
    UnparsedVersion,
)
from extender.core.quantity import Quantity
from extender.core.semver import Semver

DRIVER = "gpu.example.com"


def gpu(name: str = "device-1", **attributes: object) -> Device:
    defaults: dict[str, object] = {
        "model": "a100",
        "index": 2,
        "driverVersion": Semver.parse("560.1.0"),
        "other.example.com/healthy": True,
    }
    defaults.update(attributes)
    return Device(
        name=name,
        attributes=defaults,  # type: ignore[arg-type]
        capacity={
            "memory": DeviceCapacity(Quantity.parse("80Gi")),
            "other.example.com/slots": DeviceCapacity(Quantity.parse("4")),
        },
    )


def make_slice(*devices: Device, driver: str = DRIVER) -> ResourceSlice:
    return ResourceSlice(name="slice-1", driver=driver, pool=PoolRef("pool-1", 1, 1), devices=devices)


def one(expression: str, device: Device | None = None, **cache_options: bool) -> bool | CelRuntimeError:
    (outcome,) = SelectorCache(**cache_options).results(expression, make_slice(device or gpu()))
    return outcome


def runtime_error(expression: str, device: Device | None = None) -> str:
    outcome = one(expression, device)
    assert isinstance(outcome, CelRuntimeError), outcome
    return outcome.message


def compile_error(expression: str, *, consumable_capacity: bool = True) -> str:
    with pytest.raises(CelCompileError) as info:
        SelectorCache(consumable_capacity=consumable_capacity).compile(expression)
    return info.value.message


# --- the device view --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expression",
    [
        f'device.driver == "{DRIVER}"',
        f'device.attributes["{DRIVER}"].model == "a100"',  # bare names go under the driver's domain
        f'device.attributes["{DRIVER}"]["model"] == "a100"',
        f'device.attributes["{DRIVER}"].index == 2',
        'device.attributes["other.example.com"].healthy == true',  # qualified: split at the first "/"
        f'device.attributes["{DRIVER}"].driverVersion.isGreaterThan(semver("550.0.0"))',
        f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) > 0',
        'device.capacity["other.example.com"].slots.asInteger() == 4',
        f'"{DRIVER}" in device.attributes && "other.example.com" in device.capacity',
        '!("nope.example.com" in device.attributes)',
        f'size(device.attributes) == 2 && size(device.attributes["{DRIVER}"]) == 3',
        # unknown domains read as an empty map
        '!("x" in device.attributes["nope"])',
        '!has(device.attributes["nope"].x)',
        'size(device.capacity["nope"]) == 0',
        f'has(device.attributes["{DRIVER}"].model) && !has(device.attributes["{DRIVER}"].serial)',
        f'"model" in device.attributes["{DRIVER}"]',
        f'device.attributes["{DRIVER}"].?serial.orValue("none") == "none"',
        f'device.attributes["{DRIVER}"].?model.orValue("none") == "a100"',
        "device.allowMultipleAllocations == false",
        f'device.attributes["{DRIVER}"].exists(k, k == "model")',
    ],
)
def test_device_view(expression: str) -> None:
    assert one(expression) is True


def test_missing_key_is_a_runtime_error_with_the_upstream_text() -> None:
    assert runtime_error(f'device.attributes["{DRIVER}"].serial == "x"') == "no such key: serial"
    assert runtime_error(f'device.attributes["{DRIVER}"]["serial"] == "x"') == "no such key: serial"
    # an unknown domain is an empty map, so a field in it is missing too
    assert runtime_error('device.attributes["nope"].model == "x"') == "no such key: model"


def test_missing_key_is_absorbed_by_or_like_any_cel_error() -> None:
    assert one(f'device.attributes["{DRIVER}"].serial == "x" || true') is True
    assert one(f'false && device.attributes["{DRIVER}"].serial == "x"') is False


def test_allow_multiple_allocations_follows_the_device() -> None:
    device = Device(name="shared", allow_multiple_allocations=True)
    assert one("device.allowMultipleAllocations", device) is True


def test_allow_multiple_allocations_is_undeclared_without_consumable_capacity() -> None:
    message = compile_error("device.allowMultipleAllocations", consumable_capacity=False)
    assert "undefined field 'allowMultipleAllocations'" in message


def test_unparsable_version_fails_every_selector_on_that_device_only() -> None:
    bad = gpu("bad", driverVersion=UnparsedVersion("1.x", "Invalid character(s) found in minor number"))
    good = gpu("good")
    cache = SelectorCache()
    expected = "attribute driverVersion: parse semantic version: Invalid character(s) found in minor number"
    for expression in ('device.attributes["gpu.example.com"].model == "a100"', f'device.driver == "{DRIVER}"'):
        outcome_bad, outcome_good = cache.results(expression, make_slice(bad, good))
        assert isinstance(outcome_bad, CelRuntimeError)
        assert outcome_bad.message == expected
        assert outcome_good is True


# --- results must be bool ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "type_name"),
    [
        ("1", "int"),
        ("1 + 2", "int"),
        ('"a"', "string"),
        ('"a" + "b"', "string"),
        ("1.5", "double"),
        ("[1, 2]", "list(int)"),
        ('{"a": 1}', "map(string, int)"),
        ("null", "null_type"),
        ("device.driver", "string"),
        ('quantity("1")', "kubernetes.Quantity"),
        ('"abc".size()', "int"),
    ],
)
def test_statically_non_bool_results_do_not_compile(expression: str, type_name: str) -> None:
    assert compile_error(expression) == f"must evaluate to bool or the unknown type, not {type_name}"


def test_dynamically_non_bool_results_are_runtime_errors() -> None:
    message = runtime_error(f'device.attributes["{DRIVER}"].model')
    assert message == "CEL result of type string could not be converted to bool"
    message = runtime_error(f'device.attributes["{DRIVER}"].index')
    assert message == "CEL result of type int could not be converted to bool"


# --- compile errors ----------------------------------------------------------------------------


def test_expression_length_limit() -> None:
    padding = " " * (10240 - len("true"))
    SelectorCache().compile("true" + padding)  # exactly the limit is fine
    assert compile_error("true " + padding) == "expression too long (10241 > 10240)"


def test_length_counts_utf8_bytes_as_go_does() -> None:
    text = '"' + "é" * 5200 + '" != ""'  # 5208 characters, 10408 bytes
    assert compile_error(text).startswith("expression too long (10408 > 10240)")


@pytest.mark.parametrize(
    ("expression", "fragment"),
    [
        ("device.driver ==", "Syntax error"),
        ("device.driver == 'a", "Syntax error"),
        ("foo(1) == 1", "undeclared reference to 'foo' (in container '')"),
        ('device.driver.bogus() == ""', "undeclared reference to 'bogus' (in container '')"),
        ("x == 1", "undeclared reference to 'x' (in container '')"),
        ("device.foo == 1", "undefined field 'foo'"),
        ("has(device)", "invalid argument to has() macro"),
        ("[1].all(1, true)", "argument must be a simple name"),
        ("[1].all(x, y, true)", "two-variable all() is not supported by this CEL engine"),
        ("[1].map(x, x > 0, x) == [1]", "map(x, filter, transform) is not supported by this CEL engine"),
        ("[1].min() == 1", "function 'min' is not supported by this CEL engine"),
        ("optional.bogus(1).hasValue()", "undeclared reference to 'optional.bogus'"),
        ("cel.nope(x, 1, true)", "undeclared reference to 'cel.nope'"),
        ("cel.bind(1, 2, true)", "cel.bind() variable name must be a simple identifier"),
        ("Foo{a: 1} == 1", "message construction is not supported"),
    ],
)
def test_compile_errors(expression: str, fragment: str) -> None:
    assert fragment in compile_error(expression)


def test_compile_error_points_at_the_location() -> None:
    message = compile_error('device.driver == "a" && nope')
    assert message.splitlines() == [
        "ERROR: <input>:1:25: undeclared reference to 'nope' (in container '')",
        ' | device.driver == "a" && nope',
        " | ........................^",
    ]


def test_macro_variables_are_scoped() -> None:
    assert one("[1, 2].all(x, [3].all(y, x < y))") is True
    assert "undeclared reference to 'x'" in compile_error("[1].all(x, true) && x == 1")
    assert "undeclared reference to 'v'" in compile_error("cel.bind(v, 1, true) && v == 1")


def test_bind_evaluates_init_once_and_shadows() -> None:
    assert one("cel.bind(device, 1, device == 1)") is True
    assert one(f'cel.bind(attrs, device.attributes["{DRIVER}"], attrs.model == "a100" && attrs.index == 2)')


# --- caches ------------------------------------------------------------------------------------


def test_programs_compile_once_and_failures_are_not_cached() -> None:
    cache = SelectorCache()
    cache.compile("true")
    cache.compile("true")
    assert (cache.stats.compile_misses, cache.stats.compile_hits) == (1, 1)
    for _ in range(2):
        with pytest.raises(CelCompileError):
            cache.compile("nope")
    assert cache.stats.compile_misses == 3


def test_program_cache_is_bounded_lru() -> None:
    cache = SelectorCache(max_programs=2)
    for expression in ("1 == 1", "2 == 2", "1 == 1", "3 == 3", "1 == 1", "2 == 2"):
        cache.compile(expression)
    # 1==1 stays hot; 2==2 is evicted by 3==3 and compiled again
    assert (cache.stats.compile_misses, cache.stats.compile_hits) == (4, 2)


def test_results_are_cached_per_slice_object_until_forgotten() -> None:
    cache = SelectorCache()
    expression = f'device.attributes["{DRIVER}"].index == 2'
    first = make_slice(gpu("a"), gpu("b", index=3))
    twin = make_slice(gpu("a"), gpu("b", index=3))
    assert tuple(cache.results(expression, first)) == (True, False)
    assert cache.results(expression, first) is cache.results(expression, first)
    assert (cache.stats.result_misses, cache.stats.result_hits) == (1, 2)
    # an equal-looking but different slice object is a different cache entry
    cache.results(expression, twin)
    assert cache.stats.result_misses == 2
    cache.forget_slice(first)
    cache.results(expression, twin)
    assert cache.stats.result_misses == 2  # the other slice is untouched
    cache.results(expression, first)
    assert cache.stats.result_misses == 3
    cache.forget_slice(make_slice())  # unknown slices are fine


def test_device_views_are_built_once_per_device_across_expressions() -> None:
    cache = SelectorCache()
    slice_ = make_slice(gpu("a"), gpu("b"))
    for expression in (
        'device.attributes["gpu.example.com"].index == 2',
        "device.capacity.size() == 2",
        'device.attributes["gpu.example.com"].model == "a100"',
    ):
        cache.results(expression, slice_)
    assert cache.stats.views_built == 2
    cache.forget_slice(slice_)
    cache.results("device.capacity.size() == 2", slice_)
    assert cache.stats.views_built == 4


def test_runtime_errors_are_returned_per_device_not_raised() -> None:
    cache = SelectorCache()
    outcomes = cache.results(
        f'device.attributes["{DRIVER}"].serial == "s1"', make_slice(gpu("a", serial="s1"), gpu("b"))
    )
    assert outcomes[0] is True
    assert isinstance(outcomes[1], CelRuntimeError)
    assert outcomes[1].message == "no such key: serial"


def test_compile_error_from_results() -> None:
    with pytest.raises(CelCompileError):
        SelectorCache().results("nope", make_slice(gpu()))


# --- the fast path ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expression",
    [
        f'device.driver == "{DRIVER}"',
        f"device.driver=='{DRIVER}'",
        f'  "{DRIVER}" ==   device.driver ',
        f'device . driver == "{DRIVER}"',
        'device.driver == "other.example.com"',
    ],
)
def test_fast_path_agrees_with_cel(expression: str) -> None:
    devices = (gpu("a"), gpu("b", driverVersion=UnparsedVersion("x", "bad")))
    for driver in (DRIVER, "other.example.com"):
        slice_ = make_slice(*devices, driver=driver)
        fast = SelectorCache()
        fast_outcomes = fast.results(expression, slice_)
        assert fast.stats.fast_path == 1
        slow = SelectorCache()
        slow_outcomes = slow.results(f"({expression}) && true", slice_)
        assert slow.stats.fast_path == 0
        assert fast_outcomes[0] == slow_outcomes[0]
        assert isinstance(fast_outcomes[1], CelRuntimeError)
        assert isinstance(slow_outcomes[1], CelRuntimeError)
        assert fast_outcomes[1].message == slow_outcomes[1].message


def test_fast_path_does_not_catch_lookalikes() -> None:
    cache = SelectorCache()
    slice_ = make_slice(gpu())
    for expression in (
        f'device.driver == "{DRIVER}" || false',
        f'device.driver != "{DRIVER}"',
        'device.driver == "a\\"b"',
    ):
        cache.results(expression, slice_)
    assert cache.stats.fast_path == 0
