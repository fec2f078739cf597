"""``python -m bench.cel_engines``: run each engine in its worker process and print the tables."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.cel_engines import report
from bench.cel_engines.registry import ENGINES, EngineInfo
from bench.cel_engines.worker import RESULT_PREFIX
from bench.cel_engines.workload import DEVICES_PER_SLICE
from bench.common import positive_ints

__all__ = ["Settings", "main"]

ROOT = Path(__file__).resolve().parents[2]
#: A worker that takes longer than this is stopped and reported as failed (the slowest, the
#: stock interpreted runner at 10,000 devices and 5 rounds, takes about ten minutes).
WORKER_TIMEOUT_S = 3600
#: Compiles per timed round; compile times are a few µs to a few ms, so one compile alone is
#: too short to time reliably.
COMPILES_PER_ROUND = 20


@dataclass(frozen=True, slots=True)
class Settings:
    engines: tuple[str, ...]
    rounds: int
    devices: int
    compile_rounds: int
    speed: bool
    features: bool
    #: overrides every engine's cost-probe size (``--quick``); None keeps each engine's own
    cost_size: int | None


@dataclass
class EngineRun:
    """What one engine gave: its status line and the results of each task."""

    info: EngineInfo
    status: str = "ok"
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


def positive(text: str) -> int:
    """An argparse type: one positive number (``bench.common.positive_ints`` checks it)."""
    values = positive_ints(text)
    if len(values) != 1:
        raise argparse.ArgumentTypeError(f"{text}: give one number")
    return values[0]


def engine_names(text: str) -> tuple[str, ...]:
    """An argparse type: ``a,b`` -> ("a", "b"), each a known engine."""
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [name for name in names if name not in ENGINES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown engine(s) {', '.join(unknown)}; known: {', '.join(ENGINES)}")
    return names


def parse(argv: Sequence[str] | None) -> tuple[Settings, str | None]:
    parser = argparse.ArgumentParser(
        prog="python -m bench.cel_engines",
        description="The CEL engines on PyPI and extender.core.cel behind one interface (docs/cel-engines.md).",
    )
    parser.add_argument(
        "--engines",
        type=engine_names,
        default=tuple(ENGINES),
        help=f"comma-separated, from {', '.join(ENGINES)} (default: all)",
    )
    parser.add_argument("--reps", type=positive, default=None, help="timed rounds, the best is kept (default 5)")
    parser.add_argument("--devices", type=positive, default=None, help="devices, in slices of 8 (default 10000)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="200 devices, 2 rounds, 3 compiles per round, a small cost probe: a smoke test",
    )
    parser.add_argument(
        "--features", action="store_true", help="also run the feature and semantics probes (a1..b23) and the cost probe"
    )
    parser.add_argument("--no-speed", action="store_true", help="skip the speed measurements")
    parser.add_argument("--json", metavar="PATH", help="also write every result as JSON")
    args = parser.parse_args(argv)
    settings = Settings(
        engines=args.engines,
        rounds=args.reps or (2 if args.quick else 5),
        devices=args.devices or (200 if args.quick else 10_000),
        compile_rounds=3 if args.quick else COMPILES_PER_ROUND,
        speed=not args.no_speed,
        features=args.features,
        cost_size=10 if args.quick else None,
    )
    return settings, args.json


# --- running the workers ------------------------------------------------------------------------


def worker_command(name: str, task: str, settings: Settings) -> list[str]:
    command = [sys.executable, "-m", "bench.cel_engines.worker", name, task]
    if task == "speed":
        command += ["--devices", str(settings.devices), "--rounds", str(settings.rounds)]
        command += ["--compile-rounds", str(settings.compile_rounds)]
    elif settings.cost_size is not None:
        command += ["--cost-size", str(settings.cost_size)]
    return command


def run_worker(command: list[str]) -> dict[str, Any]:
    """The worker's result; raises RuntimeError with the end of its stderr if it failed."""
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=WORKER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"no result within {WORKER_TIMEOUT_S} s") from None
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if done.returncode != 0 or not lines:
        tail = [line for line in done.stderr.strip().splitlines() if line.strip()][-1:] or ["no output"]
        raise RuntimeError(f"exit {done.returncode}: {tail[0][:300]}")
    result: dict[str, Any] = json.loads(lines[-1][len(RESULT_PREFIX) :])
    return result


def run_engine(name: str, settings: Settings) -> EngineRun:
    run = EngineRun(ENGINES[name])
    missing = run.info.missing()
    if missing:
        run.status = f"not installed ({', '.join(missing)}): {run.info.install_hint}"
        progress(f"{name}: {run.status}; skipped")
        return run
    tasks = [task for task, wanted in (("speed", settings.speed), ("features", settings.features)) if wanted]
    for task in tasks:
        start = time.perf_counter()
        try:
            run.results[task] = run_worker(worker_command(name, task, settings))
        except RuntimeError as exc:
            run.status = f"{task} failed: {exc}"
            progress(f"{name}: {run.status}")
            continue
        run.seconds[task] = time.perf_counter() - start
        progress(f"{name}: {task} done in {run.seconds[task]:.1f} s")
    return run


def progress(text: str) -> None:
    print(f"[cel_engines] {text}", file=sys.stderr, flush=True)


# --- output -------------------------------------------------------------------------------------


def header(settings: Settings) -> str:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    engines = "; ".join(f"{name}: {ENGINES[name].versions()}" for name in settings.engines)
    return (
        f"Python {platform.python_version()} ({platform.python_implementation()}), {cpus} CPUs; {engines}; "
        f"{settings.devices} devices in slices of {DEVICES_PER_SLICE}, best of {settings.rounds} rounds, "
        f"{settings.compile_rounds} compiles per round"
    )


def tables(runs: Sequence[EngineRun], settings: Settings) -> list[tuple[str, str]]:
    """(title, table) in print order."""
    statuses = {run.info.name: (run.info.versions(), run.status) for run in runs}
    out = [("Engines", report.status_table(statuses)), ("Selectors", report.selectors_table())]
    speed = {run.info.name: run.results["speed"] for run in runs if "speed" in run.results}
    if speed:
        out += [
            ("Compile time per selector", report.compile_table(speed)),
            ("Per device: view build and each selector", report.per_device_table(speed)),
            (f"All {settings.devices} devices x 5 selectors", report.end_to_end_table(speed)),
            ("Lazy conversion and engine-specific figures", report.first_touch_table(speed)),
            ("Outcomes per selector", report.outcomes_table(speed)),
        ]
    features = {run.info.name: run.results["features"] for run in runs if "features" in run.results}
    if features:
        out += [
            ("Feature and semantics probes (CE: compile error, ERR: runtime error)", report.features_table(features)),
            ("Cost probe: three nested all() on one device", report.cost_table(features)),
        ]
    return out


def cost_note(settings: Settings) -> str:
    if settings.cost_size is not None:
        return f"Cost probe size {settings.cost_size} for every engine (--quick)."
    return (
        "Cost probe: 50³ = 125,000 iterations, except the stock celpy runners: 20³ = 8,000, "
        "since they have no limit and the full probe takes minutes there."
    )


def write_json(path: str, head: str, settings: Settings, runs: Sequence[EngineRun]) -> None:
    document = {
        "header": head,
        "settings": {
            "devices": settings.devices,
            "rounds": settings.rounds,
            "compile_rounds": settings.compile_rounds,
            "cost_size": settings.cost_size,
        },
        "engines": {
            run.info.name: {
                "versions": run.info.versions(),
                "status": run.status,
                "worker_seconds": run.seconds,
                **run.results,
            }
            for run in runs
        },
    }
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(document, fh, indent=2, ensure_ascii=False)
        fh.write("\n")


def main(argv: Sequence[str] | None = None) -> int:
    settings, json_path = parse(argv)
    head = header(settings)
    print(head, flush=True)
    runs = [run_engine(name, settings) for name in settings.engines]
    for title, table in tables(runs, settings):
        print(f"\n### {title}\n\n{table}")
    if settings.features:
        print(f"\n{cost_note(settings)}", flush=True)
    if json_path:
        write_json(json_path, head, settings, runs)
    # An engine that is not installed is skipped; one that is installed but failed is an error.
    return 1 if any("failed" in run.status for run in runs) else 0
