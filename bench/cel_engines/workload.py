"""What every engine is measured on: five selectors, deterministic devices, the feature probes.

The selectors and devices are those of the first comparison of the CEL engines (same seed, same
order of random draws), so that figures from different runs stay comparable. The values are the
project's own ``Quantity`` and ``Semver``, parsed once and shared by every device that has the
same text; each adapter converts them into what its engine can hold.

Nothing here imports a CEL engine: the parent process uses this module to describe the run
while the engines live in their own worker processes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from extender.core.quantity import Quantity
from extender.core.semver import Semver

__all__ = [
    "CASES",
    "DEVICES_PER_SLICE",
    "DRIVER",
    "OTHER_DRIVER",
    "SELECTORS",
    "AttributeValue",
    "DeviceSpec",
    "FeatureCase",
    "SliceSpec",
    "cost_expression",
    "feature_device",
    "make_slices",
]

DRIVER = "gpu.example.com"
#: 10% of the slices belong to this driver: no gpu.example.com domain, so S2 and S4 take the
#: error path on them.
OTHER_DRIVER = "nic.example.com"
DEVICES_PER_SLICE = 8

#: S1..S5: driver and model, a quantity comparison, the driver alone, a semver comparison, and
#: an attribute-presence test with two more comparisons (bench/allocator.py uses the same five).
SELECTORS: dict[str, str] = {
    "S1": f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].model == "a100"',
    "S2": f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0',
    "S3": f'device.driver == "{DRIVER}"',
    "S4": f'device.attributes["{DRIVER}"].driverVersion.isGreaterThan(semver("550.0.0"))',
    "S5": f'"{DRIVER}" in device.attributes && device.attributes["{DRIVER}"].index < 4 '
    f'&& device.attributes["{DRIVER}"].architecture == "Ampere"',
}

AttributeValue = str | int | bool | Semver

_GPUS = (("a100", "Ampere"), ("h100", "Hopper"), ("l4", "Ada"), ("t4", "Turing"), ("a10", "Ampere"))
_DRIVER_VERSIONS = ("535.104.5", "550.54.14", "560.35.3", "570.86.10-beta.1")
_MEMORY = ("16Gi", "24Gi", "40Gi", "80Gi", "81920Mi")


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """One device as a neutral description. Attribute and capacity names are bare: they live in
    the driver's domain (``device.attributes[driver]``), as in a real ResourceSlice."""

    name: str
    driver: str
    attributes: dict[str, AttributeValue]
    capacity: dict[str, Quantity]
    allow_multiple_allocations: bool = False


@dataclass(frozen=True, slots=True)
class SliceSpec:
    """Devices published together; one driver per slice, as in Kubernetes."""

    name: str
    driver: str
    devices: tuple[DeviceSpec, ...] = field(default=())


class _Values:
    """Parse each quantity and version text once, so devices share value objects (as the
    extender's decoded slices do, and as the first comparison did)."""

    def __init__(self) -> None:
        self._quantities: dict[str, Quantity] = {}
        self._versions: dict[str, Semver] = {}

    def quantity(self, text: str) -> Quantity:
        value = self._quantities.get(text)
        if value is None:
            value = self._quantities[text] = Quantity.parse(text)
        return value

    def semver(self, text: str) -> Semver:
        value = self._versions.get(text)
        if value is None:
            value = self._versions[text] = Semver.parse(text)
        return value


def make_slices(devices: int, *, other_fraction: float = 0.1, seed: int = 1) -> list[SliceSpec]:
    """``devices`` devices in slices of 8. The random draws happen in the first comparison's
    order (per slice: other-or-not; per GPU: model, driver version, memory), which keeps the
    outcome counts of the selectors identical to its figures."""
    rnd = random.Random(seed)
    values = _Values()
    slices: list[SliceSpec] = []
    for start in range(0, devices, DEVICES_PER_SLICE):
        other = rnd.random() < other_fraction
        count = min(DEVICES_PER_SLICE, devices - start)
        members = tuple(_nic(start + i, i, values) if other else _gpu(start + i, i, rnd, values) for i in range(count))
        slices.append(SliceSpec(f"slice-{start}", OTHER_DRIVER if other else DRIVER, members))
    return slices


def _nic(number: int, index: int, values: _Values) -> DeviceSpec:
    return DeviceSpec(
        name=f"dev-{number}",
        driver=OTHER_DRIVER,
        attributes={"model": "cx7", "index": index},
        capacity={"bandwidth": values.quantity("400G")},
    )


def _gpu(number: int, index: int, rnd: random.Random, values: _Values) -> DeviceSpec:
    model, architecture = rnd.choice(_GPUS)
    version = rnd.choice(_DRIVER_VERSIONS)
    memory = rnd.choice(_MEMORY)
    return DeviceSpec(
        name=f"dev-{number}",
        driver=DRIVER,
        attributes={
            "model": model,
            "architecture": architecture,
            "driverVersion": values.semver(version),
            "index": index,
        },
        capacity={"memory": values.quantity(memory)},
    )


# --- feature probes -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FeatureCase:
    """One probe: ``expected`` is what cel-go with the Kubernetes library gives (our reading of
    upstream; the dra-extender test suite checks its own answers against it)."""

    id: str
    expression: str
    expected: str


_A = f'device.attributes["{DRIVER}"]'
_C = f'device.capacity["{DRIVER}"]'
_MISSING = f'{_A}.missing == "x"'

#: a1..a10: the Kubernetes library (quantity, semver, member-only overloads);
#: b1..b23: map semantics, short-circuit around errors, error texts, compile-time checks.
CASES: tuple[FeatureCase, ...] = (
    FeatureCase("a1", 'quantity("40Gi").compareTo(quantity("30Gi")) == 1', "true"),
    FeatureCase("a2", f'{_C}.memory.compareTo(quantity("40Gi")) >= 0', "true"),
    FeatureCase("a3", f'{_C}.memory.isGreaterThan(quantity("40Gi"))', "true"),
    FeatureCase("a4", f"{_C}.memory.asApproximateFloat() > 1e10", "true"),
    FeatureCase("a5", f'{_A}.driverVersion.isGreaterThan(semver("550.0.0"))', "true"),
    FeatureCase("a6", f"{_A}.driverVersion.major() == 550", "true"),
    FeatureCase("a7", 'semver("1.0.0-rc.1").isLessThan(semver("1.0.0"))', "true"),
    FeatureCase("a8", 'quantity("bogus").compareTo(quantity("1")) == 0', "error (quantities must match ...)"),
    FeatureCase("a9", f'{_A}.model.compareTo(quantity("1")) == 0', "error: no such overload"),
    FeatureCase("a10", 'compareTo(quantity("1"), quantity("2")) == -1', "compile error (member-only overload)"),
    FeatureCase("b1", _MISSING, "error: no such key: missing"),
    FeatureCase("b2", 'device.attributes["other.com"].x == "x"', "error: no such key: x"),
    FeatureCase("b3", f"has({_A}.model)", "true"),
    FeatureCase("b4", f"has({_A}.missing)", "false"),
    FeatureCase("b5", 'has(device.attributes["other.com"].x)', "false"),
    FeatureCase("b6", f'"{DRIVER}" in device.attributes', "true"),
    FeatureCase("b7", '"other.com" in device.attributes', "false"),
    FeatureCase("b8", f'"model" in {_A}', "true"),
    FeatureCase("b9", f"false && {_MISSING}", "false"),
    FeatureCase("b10", f"{_MISSING} && false", "false"),
    FeatureCase("b11", f"true || {_MISSING}", "true"),
    FeatureCase("b12", f"{_MISSING} || true", "true"),
    FeatureCase("b13", f"true && {_MISSING}", "error: no such key: missing"),
    FeatureCase("b14", f"false || {_MISSING}", "error: no such key: missing"),
    FeatureCase("b15", f'{_A}.index == "3"', "false (dyn) / compile error (typed)"),
    FeatureCase("b16", "1 / 0 == 1", "error: division by zero"),
    FeatureCase("b17", "undeclared == 1", "compile error: undeclared reference to 'undeclared'"),
    FeatureCase("b18", "device.nope == 1", "compile error: undefined field 'nope'"),
    FeatureCase("b19", f"{_A}.index", "compile/runtime error: not bool"),
    FeatureCase("b20", "device.driver ==", "compile error: Syntax error"),
    FeatureCase("b21", f'{_A}.model.lowerAscii() == "a100"', "true (k8s string ext)"),
    FeatureCase("b22", f'{_A}.model.startsWith("a1")', "true"),
    FeatureCase("b23", "device.allowMultipleAllocations == false", "true"),
)


def feature_device() -> DeviceSpec:
    """The one device the feature probes run on."""
    return DeviceSpec(
        name="gpu-0",
        driver=DRIVER,
        attributes={
            "model": "a100",
            "architecture": "Ampere",
            "driverVersion": Semver.parse("550.54.14"),
            "index": 3,
        },
        capacity={"memory": Quantity.parse("80Gi")},
    )


def cost_expression(size: int) -> str:
    """Three nested ``all()`` over a ``size``-element list: ``size ** 3`` iterations. No engine
    exposes a static cost estimate, so this measures what each does with an expensive
    selector at run time (a limit, a budget, or nothing)."""
    items = "[" + ",".join(str(i) for i in range(size)) + "]"
    return f"{items}.all(x, {items}.all(y, {items}.all(z, x + y + z >= 0)))"
