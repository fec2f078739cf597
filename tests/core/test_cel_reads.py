"""What of a device a selector reads (``extender/core/cel/reads.py``), and the verdicts remembered
per combination of those values (``Compiled``): found only where nothing else is read, and never
an answer that evaluating the device itself would not give."""

from __future__ import annotations

import pytest

from extender.core.cel import CelRuntimeError, SelectorCache
from extender.core.cel.celpy_glue import parse
from extender.core.cel.compiler import compile_program
from extender.core.cel.programs import MEMO_SIZE, Compiled, SliceState
from extender.core.cel.reads import device_reads
from extender.core.cel.stats import SelectorStats
from extender.core.model import Device, DeviceCapacity, PoolRef, ResourceSlice
from extender.core.quantity import Quantity
from extender.core.semver import Semver

D = "gpu.example.com"


@pytest.mark.parametrize(
    ("expression", "reads"),
    [
        (f'device.attributes["{D}"].model == "a100"', (("attributes", D, "model"),)),
        (f'device.attributes["{D}"]["index"] < 6', (("attributes", D, "index"),)),
        (
            f'device.capacity["{D}"].memory.compareTo(quantity("40Gi")) >= 0 && device.driver == "{D}"',
            (("capacity", D, "memory"), ("driver",)),
        ),
        (f'has(device.attributes["{D}"].healthy)', (("attributes", D, "healthy"),)),
        (f"device.attributes['{D}'].a == 1 || device.attributes['{D}'].a == 2", (("attributes", D, "a"),)),
        ("device.allowMultipleAllocations", (("allowMultipleAllocations",),)),
        ("1 == 1", ()),
    ],
)
def test_fixed_reads_of_the_device_are_found(expression: str, reads: tuple[tuple[str, ...], ...]) -> None:
    assert device_reads(parse(expression)) == reads


@pytest.mark.parametrize(
    "expression",
    [
        f'"model" in device.attributes["{D}"]',  # a domain map as a value
        f'device.attributes["{D}"].exists(k, k == "model")',  # a comprehension over it
        "size(device.attributes) > 0",  # the whole map
        f'device.attributes["{D}" + ""].model == "a"',  # a key computed
        f'device.attributes[r"{D}"].model == "a"',  # a raw string
        'device.attributes["a\\x2eb"].model == "a"',  # an escape
        "[1].all(device, device > 0)",  # a variable named device
        f'cel.bind(device, 1, device > 0) && device.attributes["{D}"].a == 1',
        f'device.attributes["{D}"].model == device.driver || [device][0].driver == "x"',  # one other use
    ],
)
def test_any_other_use_of_the_device_reads_it_whole(expression: str) -> None:
    assert device_reads(parse(expression)) is None


def device(name: str, attributes: dict[str, object], memory: str = "80Gi") -> Device:
    return Device(
        name=name,
        attributes=attributes,  # type: ignore[arg-type]
        capacity={"memory": DeviceCapacity(Quantity.parse(memory))},
    )


#: Devices that Python's == would lump together but a selector can tell apart.
TRICKY = (
    device("a", {"flag": True, "n": 1, "v": Semver.parse("1.0.0+a"), "s": "x"}, "1Gi"),
    device("b", {"flag": 1, "n": True, "v": Semver.parse("1.0.0+b"), "s": "x"}, "1024Mi"),
    device("c", {"flag": True, "n": 1, "v": Semver.parse("1.0.0+a"), "s": "x"}, "1Gi"),  # a's twin
    device("d", {"n": 2, "s": "y", "tags": ("a", "b")}, "2Gi"),  # no flag, no v
    device("e", {"flag": False, "n": "1", "s": "x", "tags": ("a", "b")}, "1073741824"),
)
EXPRESSIONS = (
    f'device.attributes["{D}"].flag == true',
    f'device.attributes["{D}"].flag == 1',
    f'device.attributes["{D}"].n == 1',
    f'type(device.attributes["{D}"].n) == int',
    f'string(device.capacity["{D}"].memory) == "1Gi"',
    f'device.capacity["{D}"].memory.compareTo(quantity("1Gi")) == 0',
    f'device.attributes["{D}"].v == semver("1.0.0+a")',
    f'device.attributes["{D}"].v.isGreaterThan(semver("0.9.0"))',
    f'has(device.attributes["{D}"].flag)',
    f'device.attributes["{D}"].s.startsWith("x") && device.attributes["{D}"].missing == 1',
    f'"a" in device.attributes["{D}"].tags',
    'device.attributes["other.example.com"].anything == 1',
)


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_remembered_verdicts_are_what_each_device_gets_on_its_own(expression: str) -> None:
    program = compile_program(expression)
    assert isinstance(program, Compiled) and program.reads is not None
    slice_ = ResourceSlice(name="s", driver=D, pool=PoolRef("p", 1, 1), devices=TRICKY)
    state = SliceState(slice_, consumable_capacity=True)
    stats = SelectorStats()
    views = state.views(stats)
    alone = [view if isinstance(view, CelRuntimeError) else program.evaluate(view) for view in views]
    twice = [program.run(state, stats), program.run(SliceState(slice_, consumable_capacity=True), stats)]
    for remembered in twice:
        assert [_text(v) for v in remembered] == [_text(v) for v in alone], expression
    assert stats.memo_hits >= len(TRICKY) + 1  # the second run all from memory, c from a's


def _text(verdict: bool | CelRuntimeError) -> object:
    return verdict.message if isinstance(verdict, CelRuntimeError) else verdict


def test_a_selector_over_many_alike_devices_is_evaluated_once_per_distinct_value() -> None:
    """15 000 nodes x 8 GPUs differ in their UUIDs; a selector on memory and index sees 8 kinds."""
    cache = SelectorCache()
    expression = f'device.capacity["{D}"].memory.compareTo(quantity("40Gi")) >= 0 && device.attributes["{D}"].index < 6'
    for n in range(50):
        gpus = tuple(device(f"gpu-{i}", {"index": i, "uuid": f"GPU-{n}-{i}"}) for i in range(8))
        slice_ = ResourceSlice(name=f"node-{n}", driver=D, pool=PoolRef(f"node-{n}", 1, 1), devices=gpus)
        assert list(cache.results(expression, slice_)) == [i < 6 for i in range(8)]
    assert cache.stats.evaluations == 8 and cache.stats.memo_hits == 50 * 8 - 8


def test_a_selector_reading_a_unique_value_stops_remembering_at_the_bound() -> None:
    cache = SelectorCache()
    expression = f'device.attributes["{D}"].uuid.startsWith("GPU-")'
    gpus = tuple(device(f"gpu-{i}", {"uuid": f"GPU-{i}"}) for i in range(MEMO_SIZE + 10))
    slice_ = ResourceSlice(name="big", driver=D, pool=PoolRef("big", 1, 1), devices=gpus)
    assert all(verdict is True for verdict in cache.results(expression, slice_))
    program = compile_program(expression)
    assert isinstance(program, Compiled)
    assert cache.stats.evaluations == MEMO_SIZE + 10 and cache.stats.memo_hits == 0


def test_an_outcome_that_depends_on_where_it_ran_is_not_remembered() -> None:
    """A library fault or the recursion limit (deeper in a filter than in the warm-up) is this
    evaluation's, not the values': the next device with the same values is evaluated again."""
    calls: list[int] = []

    def function(scope: object) -> bool:
        calls.append(1)
        if len(calls) == 1:
            raise RecursionError
        if len(calls) == 2:
            raise KeyError("a bug")
        return True

    program = Compiled(function, 1, (("driver",),))
    slice_ = ResourceSlice(name="s", driver=D, pool=PoolRef("p", 1, 1), devices=TRICKY[:1])
    outcomes = [program.run(SliceState(slice_, consumable_capacity=True), SelectorStats())[0] for _ in range(4)]
    assert [_text(o) for o in outcomes] == [
        "max recursion depth exceeded",
        "internal error: KeyError('a bug')",
        True,
        True,
    ]
    assert len(calls) == 3  # the fourth from the memo
