"""The project's own engine, ``extender.core.cel``, through its public parts only:
``compile_program``, ``SelectorCache``, ``SelectorStats``, ``programs.SliceState`` and a
program's ``run(state, stats)``.

The package evaluates per slice: a ``SliceState`` builds the views of all its devices once (the
strings they share converted once), and ``program.run`` returns one result per device. The
adapter maps the common interface onto that path instead of wrapping every device in a slice of
its own, so the figures are what the extender pays: a "view" here is a slice's state with its
views built, ``evaluate_slice`` is one ``run``, and ``end_to_end`` goes through a fresh
``SelectorCache`` as the allocator does. ``device.driver == "..."`` (S3) never reaches CEL in
the package (``DriverEquals``); ``extra_timings`` reports the same selector through CEL.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench.cel_engines.interface import CompileError, Engine, Outcome, Program
from bench.cel_engines.timing import best_seconds
from bench.cel_engines.workload import SELECTORS, DeviceSpec, SliceSpec
from extender.core.cel import CelCompileError, SelectorCache, SelectorStats, compile_program
from extender.core.cel.programs import SliceState
from extender.core.model import Device, DeviceCapacity, PoolRef, ResourceSlice

__all__ = ["DraExtender", "resource_slice"]

#: The package's default; the stock engines are given allowMultipleAllocations too.
CONSUMABLE_CAPACITY = True


def resource_slice(spec: SliceSpec) -> ResourceSlice:
    """The model's ResourceSlice for one slice description (each in a pool of its own)."""
    devices = tuple(_device(device) for device in spec.devices)
    return ResourceSlice(
        name=spec.name,
        driver=spec.driver,
        pool=PoolRef(name=f"pool-{spec.name}", generation=1, resource_slice_count=1),
        node_name=f"node-{spec.name}",
        devices=devices,
    )


def _device(spec: DeviceSpec) -> Device:
    return Device(
        name=spec.name,
        attributes=dict(spec.attributes),
        capacity={name: DeviceCapacity(value=value) for name, value in spec.capacity.items()},
        allow_multiple_allocations=spec.allow_multiple_allocations,
    )


class _DraProgram(Program):
    __slots__ = ("_program", "_stats")

    def __init__(self, program: Any, stats: SelectorStats) -> None:
        self._program = program
        self._stats = stats

    def evaluate(self, view: SliceState) -> Outcome:
        return self.evaluate_slice(view)[0]

    def evaluate_slice(self, views: SliceState) -> Sequence[Outcome]:
        # The result tuple as the package returns it: bool or CelRuntimeError (which has a
        # ``message``), nothing converted.
        results: Sequence[Outcome] = self._program.run(views, self._stats)
        return results


class DraExtender(Engine):
    name = "dra-extender"

    def __init__(self) -> None:
        self._stats = SelectorStats()

    def compile(self, expression: str) -> Program:
        try:
            program = compile_program(expression, consumable_capacity=CONSUMABLE_CAPACITY)
        except CelCompileError as exc:
            raise CompileError(exc.message) from None
        return _DraProgram(program, self._stats)

    def view(self, device: DeviceSpec) -> SliceState:
        """One device in a slice of its own (the feature probes' path)."""
        spec = SliceSpec(name=f"slice-{device.name}", driver=device.driver, devices=(device,))
        return self.slice_views(resource_slice(spec))

    def prepare(self, slices: Sequence[SliceSpec]) -> list[ResourceSlice]:
        """The decoded slices the extender holds in its store."""
        return [resource_slice(spec) for spec in slices]

    def slice_views(self, prepared: ResourceSlice) -> SliceState:
        state = SliceState(prepared, consumable_capacity=CONSUMABLE_CAPACITY)
        state.views(self._stats)
        return state

    def end_to_end(self, expressions: Sequence[str], prepared: Sequence[Any]) -> int:
        """What the allocator does with a fresh cache: compile, then results per slice."""
        cache = SelectorCache(consumable_capacity=CONSUMABLE_CAPACITY)
        for expression in expressions:
            cache.compile(expression)
        matched = 0
        for item in prepared:
            for expression in expressions:
                matched += sum(1 for outcome in cache.results(expression, item) if outcome is True)
        return matched

    def extra_timings(self, prepared: Sequence[Any], rounds: int) -> dict[str, float]:
        """S3 through CEL: parenthesised, so the ``device.driver == "..."`` shortcut does not
        take it (µs per device, views already built)."""
        program = self.compile(f"({SELECTORS['S3']})")
        states = [self.slice_views(item) for item in prepared]
        devices = sum(len(item.devices) for item in prepared)
        seconds = best_seconds(_run_all, rounds, program, states)
        return {"S3 through CEL (µs/device)": seconds / max(devices, 1) * 1e6}


def _run_all(program: Program, states: Sequence[SliceState]) -> list[Sequence[Outcome]]:
    return [program.evaluate_slice(state) for state in states]
