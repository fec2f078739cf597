"""Allocator benchmarks: a filter across many nodes, cold CEL selector cost, slice ingest.

Run from the repository root::

    python -m bench.allocator [--repeat N] [--quick] [--json PATH] [--gc {freeze,on,off}]

Scenarios (all inputs from ``tests.builders.synthetic_cluster``, GPU-like devices):

- ``filter warm``: one pod with one claim for one device of the GPU class, tried against every
  node the way a filter does (one ``Allocator``, ``allocate_many(nodes)``). The SelectorCache and
  the snapshot's per-node pool memo were filled by a previous, untimed pass.
- ``filter cold``: the same with a fresh SelectorCache and a fresh SliceSnapshot per run (what the
  first filter after every slice changed would pay), CEL evaluation included.
- ``CEL cold 5 selectors``: five typical class and request selectors (S1..S5) over N devices through a fresh
  SelectorCache: compile + evaluate every device. ``CEL warm lookups``: the same calls again.
- ``snapshot index``: ``SliceSnapshot(slices)`` for the filter's largest cluster.
- ``ingest orjson.loads`` / ``ingest decode``: a LIST body of slices parsed, then each item
  decoded with ``extender.core.convert.decode_resource_slice`` (skipped if convert is missing).

Columns: best and median of ``--repeat`` timed runs (warm-up excluded), µs per item (node,
device evaluation or slice; from the best run), and the allocator's deterministic search-step
count summed over the pass. ``target`` compares the *median* with the project's targets on a
2-core machine (only for the full sizes). Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from importlib import metadata
from typing import Any, TypeVar

import orjson

from extender.core.allocator import Allocation, Allocator
from extender.core.cel import SelectorCache
from extender.core.model import DeviceClass, NodeInfo, ResourceClaim, ResourceSlice
from extender.core.pools import SliceSnapshot
from tests import builders as b

__all__ = ["SELECTORS", "Row", "main", "run"]

D = b.GPU_DRIVER
#: Five typical selectors, S1..S5: driver and model, a quantity comparison, the driver alone, a
#: semver comparison, and an attribute-presence test with two more comparisons.
SELECTORS: tuple[str, ...] = (
    f'device.driver == "{D}" && device.attributes["{D}"].model == "a100"',
    f'device.capacity["{D}"].memory.compareTo(quantity("40Gi")) >= 0',
    f'device.driver == "{D}"',
    f'device.attributes["{D}"].driverVersion.isGreaterThan(semver("550.0.0"))',
    f'"{D}" in device.attributes && device.attributes["{D}"].index < 4 '
    f'&& device.attributes["{D}"].architecture == "Ampere"',
)
DEVICES_PER_NODE = 10

#: (scenario, n) -> median budget in ms on a 2-core machine.
TARGETS_MS: dict[tuple[str, int], float] = {
    ("filter warm", 500): 2.0,
    ("filter warm", 5000): 20.0,
    ("CEL cold 5 selectors", 10_000): 3000.0,
}

T = TypeVar("T")
S = TypeVar("S")


@dataclass
class Row:
    scenario: str
    n: int
    best_ms: float
    median_ms: float
    us_per_item: float
    search_steps: int | None = None
    target_ms: float | None = None

    @property
    def target(self) -> str:
        if self.target_ms is None:
            return "—"
        verdict = "ok" if self.median_ms <= self.target_ms else "MISSED"
        return f"{verdict} (≤ {self.target_ms:g} ms)"


def timed(repeat: int, prepare: Callable[[], S], body: Callable[[S], T]) -> tuple[list[float], T]:
    """Run ``body(prepare())`` ``repeat`` times; only ``body`` is timed. Returns ms per run."""
    times: list[float] = []
    result: T | None = None
    for _ in range(repeat):
        state = prepare()
        start = time.perf_counter_ns()
        result = body(state)
        times.append((time.perf_counter_ns() - start) / 1e6)
    assert result is not None
    return times, result


def make_row(scenario: str, n: int, items: int, times: list[float], steps: int | None = None) -> Row:
    best = min(times)
    return Row(
        scenario=scenario,
        n=n,
        best_ms=best,
        median_ms=statistics.median(times),
        us_per_item=best * 1000 / max(items, 1),
        search_steps=steps,
        target_ms=TARGETS_MS.get((scenario, n)),
    )


# --- scenarios -------------------------------------------------------------------------------------


def one_device_claim(device_class: DeviceClass) -> ResourceClaim:
    return b.claim("gpu-claim", b.request("gpu", device_class.name, 1))


def filter_pass(
    claims: Sequence[ResourceClaim],
    classes: dict[str, DeviceClass],
    snapshot: SliceSnapshot,
    nodes: Sequence[NodeInfo],
    cache: SelectorCache,
) -> tuple[int, int]:
    """What one filter call does for one pod: returns (nodes that fit, total search steps)."""
    allocator = Allocator(claims, classes=classes, snapshot=snapshot, selectors=cache)
    outcomes = allocator.allocate_many(nodes)
    fits = sum(1 for outcome in outcomes if isinstance(outcome, Allocation))
    return fits, allocator.search_steps  # counted over every node of the pass


def bench_filter(nodes: int, repeat: int) -> list[Row]:
    slices, class_list, node_infos = b.synthetic_cluster(nodes, DEVICES_PER_NODE, seed=nodes)
    classes = {c.name: c for c in class_list}
    claims = [one_device_claim(class_list[0])]
    settle()

    warm_snapshot = SliceSnapshot(slices)
    warm_cache = SelectorCache()
    fits, _ = filter_pass(claims, classes, warm_snapshot, node_infos, warm_cache)  # fills both
    assert fits == nodes, f"only {fits} of {nodes} nodes fit"
    times, (_, steps) = timed(
        repeat, lambda: None, lambda _: filter_pass(claims, classes, warm_snapshot, node_infos, warm_cache)
    )
    rows = [make_row("filter warm", nodes, nodes, times, steps)]

    def fresh() -> tuple[SliceSnapshot, SelectorCache]:
        return SliceSnapshot(slices), SelectorCache()

    times, (_, steps) = timed(repeat, fresh, lambda st: filter_pass(claims, classes, st[0], node_infos, st[1]))
    rows.append(make_row("filter cold", nodes, nodes, times, steps))

    times, _ = timed(repeat, lambda: None, lambda _: SliceSnapshot(slices))
    rows.append(make_row("snapshot index", len(slices), len(slices), times))
    return rows


def evaluate_all(cache: SelectorCache, slices: Sequence[ResourceSlice]) -> int:
    matched = 0
    for expression in SELECTORS:
        cache.compile(expression)
        for s in slices:
            matched += sum(1 for r in cache.results(expression, s) if r is True)
    return matched


def bench_cel(devices: int, repeat: int) -> list[Row]:
    slices, _, _ = b.synthetic_cluster(devices // DEVICES_PER_NODE, DEVICES_PER_NODE, seed=devices)
    settle()
    evaluations = len(SELECTORS) * devices
    times, _ = timed(repeat, SelectorCache, lambda cache: evaluate_all(cache, slices))
    rows = [make_row("CEL cold 5 selectors", devices, evaluations, times)]
    warm = SelectorCache()
    evaluate_all(warm, slices)
    times, _ = timed(repeat, lambda: warm, lambda cache: evaluate_all(cache, slices))
    rows.append(make_row("CEL warm lookups", devices, evaluations, times))
    return rows


def bench_ingest(slice_count: int, repeat: int) -> list[Row]:
    try:
        from extender.core.convert import decode_resource_slice
    except ImportError:
        return []
    slices, _, _ = b.synthetic_cluster(slice_count, DEVICES_PER_NODE, seed=slice_count)
    body = orjson.dumps(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSliceList",
            "items": [b.slice_manifest(s) for s in slices],
        }
    )
    del slices
    settle()
    times, parsed = timed(repeat, lambda: None, lambda _: orjson.loads(body))
    rows = [make_row("ingest orjson.loads", slice_count, slice_count, times)]
    items = parsed["items"]
    times, decoded = timed(repeat, lambda: None, lambda _: [decode_resource_slice(item) for item in items])
    assert all(s.invalid_reason is None for s in decoded)
    rows.append(make_row("ingest decode", slice_count, slice_count, times))
    return rows


# --- running -------------------------------------------------------------------------------------------

_GC_MODE = "freeze"


def settle() -> None:
    """Apply the gc mode to freshly built inputs: production freezes the synced cache (libraries.md §1)."""
    if _GC_MODE == "freeze":
        gc.collect()
        gc.freeze()


def header(repeat: int) -> str:
    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "absent"

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    gc_text = {"freeze": "gc frozen after input build", "on": "gc on", "off": "gc disabled"}[_GC_MODE]
    return (
        f"Python {platform.python_version()} ({platform.python_implementation()}), {cpus} CPUs, "
        f"cel-python {version('cel-python')}, orjson {version('orjson')}, {gc_text}, repeat {repeat}"
    )


def table(rows: Sequence[Row]) -> str:
    lines = [
        "| scenario | n | best ms | median ms | µs/item | search steps | target |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        steps = "—" if r.search_steps is None else str(r.search_steps)
        numbers = [f"{r.best_ms:.2f}", f"{r.median_ms:.2f}", f"{r.us_per_item:.2f}"]
        cells = [r.scenario, str(r.n), *numbers, steps]
        lines.append(f"| {' | '.join(cells)} | {r.target} |")
    return "\n".join(lines)


def run(*, quick: bool, repeat: int) -> list[Row]:
    node_counts = (20, 50) if quick else (100, 500, 5000)
    cel_devices = 200 if quick else 10_000
    ingest_slices = 100 if quick else 5000
    # Warm-up of one-time costs (imports, building the CEL parser; libraries.md §2). Compiles stay
    # in the timings: programs are cached per SelectorCache, and cold runs use a fresh one.
    bench_filter(5, 1)
    evaluate_all(SelectorCache(), b.synthetic_cluster(1, DEVICES_PER_NODE)[0])
    rows: list[Row] = []
    for nodes in node_counts:
        rows.extend(bench_filter(nodes, repeat))
    rows.extend(bench_cel(cel_devices, repeat))
    rows.extend(bench_ingest(ingest_slices, repeat))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    global _GC_MODE
    parser = argparse.ArgumentParser(prog="python -m bench.allocator", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per scenario (default 5)")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a CI smoke run")
    parser.add_argument("--json", metavar="PATH", help="also write the header and rows as JSON")
    parser.add_argument(
        "--gc",
        choices=("freeze", "on", "off"),
        default="freeze",
        help="gc mode during timing (default freeze)",
    )
    args = parser.parse_args(argv)
    repeat = max(1, args.repeat)
    _GC_MODE = args.gc
    was_enabled = gc.isenabled()
    if _GC_MODE == "off":
        gc.disable()
    try:
        head = header(repeat)
        print(head, flush=True)
        rows = run(quick=args.quick, repeat=repeat)
    finally:
        if _GC_MODE == "freeze":
            gc.unfreeze()
        if was_enabled:
            gc.enable()
    print()
    print(table(rows))
    if args.json:
        document: dict[str, Any] = {
            "header": head,
            "rows": [{**asdict(r), "target": r.target} for r in rows],
        }
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(document, fh, indent=2)
            fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
