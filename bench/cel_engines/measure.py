"""The measurements, run inside one engine's worker process: speed and feature probes.

Speed, for ``devices`` devices in slices of 8 (best of ``rounds`` each):

- compile: ``compile_rounds`` compiles of one selector, per compile;
- view: building every device's view (µs per device);
- eval S1..S5: one selector over every view (µs per device). Each round builds fresh views and
  runs S1..S5 in that order, so an engine that converts its input lazily pays the conversion
  in S1 (``first_touch`` shows how much);
- end to end: compile the five, then per slice the views once and the five selectors on them;
- outcomes: per selector, how many devices gave true, false or which error.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from bench.cel_engines.interface import CompileError, Engine, Outcome, Program, outcome_key
from bench.cel_engines.timing import best_seconds, timed
from bench.cel_engines.workload import CASES, SELECTORS, cost_expression, feature_device, make_slices

__all__ = ["measure_features", "measure_speed"]


def measure_speed(engine: Engine, *, devices: int, rounds: int, compile_rounds: int) -> dict[str, Any]:
    """Every speed figure of one engine, as a JSON-ready dict (µs, or s for end to end)."""
    prepared = engine.prepare(make_slices(devices))
    count = sum(len(item.devices) for item in prepared)
    programs = {sid: engine.compile(expression) for sid, expression in SELECTORS.items()}
    view_us, eval_us, outcomes = _views_and_evaluations(engine, prepared, programs, rounds, count)
    expressions = list(SELECTORS.values())
    return {
        "devices": count,
        "rounds": rounds,
        "compile_us": {
            sid: best_seconds(_compile_many, rounds, engine, expression, compile_rounds) / compile_rounds * 1e6
            for sid, expression in SELECTORS.items()
        },
        "view_us": view_us,
        "eval_us": eval_us,
        "end_to_end_s": best_seconds(engine.end_to_end, rounds, expressions, prepared),
        "first_touch_us": _first_touch(engine, prepared, programs["S3"], count),
        "extra_us": engine.extra_timings(prepared, rounds),
        "outcomes": outcomes,
    }


def _compile_many(engine: Engine, expression: str, times: int) -> None:
    for _ in range(times):
        engine.compile(expression)


def _build_views(engine: Engine, prepared: Sequence[Any]) -> list[Any]:
    slice_views = engine.slice_views
    return [slice_views(item) for item in prepared]


def _evaluate_all(program: Program, views: Sequence[Any]) -> list[Sequence[Outcome]]:
    evaluate = program.evaluate_slice
    return [evaluate(item) for item in views]


def _views_and_evaluations(
    engine: Engine, prepared: Sequence[Any], programs: dict[str, Program], rounds: int, count: int
) -> tuple[float, dict[str, float], dict[str, dict[str, int]]]:
    """Best view-build time and best time per selector, µs per device; the outcome counts."""
    view_times: list[float] = []
    eval_times: dict[str, list[float]] = {sid: [] for sid in programs}
    results: dict[str, list[Sequence[Outcome]]] = {}
    for _ in range(max(1, rounds)):
        seconds, views = timed(_build_views, engine, prepared)
        view_times.append(seconds)
        for sid, program in programs.items():
            seconds, results[sid] = timed(_evaluate_all, program, views)
            eval_times[sid].append(seconds)
        del views
    per_device = 1e6 / max(count, 1)
    outcomes = {sid: _counts(per_slice) for sid, per_slice in results.items()}
    return min(view_times) * per_device, {sid: min(t) * per_device for sid, t in eval_times.items()}, outcomes


def _counts(per_slice: Sequence[Sequence[Outcome]]) -> dict[str, int]:
    counter = Counter(outcome_key(outcome) for results in per_slice for outcome in results)
    return dict(sorted(counter.items()))


def _first_touch(engine: Engine, prepared: Sequence[Any], program: Program, count: int) -> dict[str, float]:
    """S3 on fresh views, then again on the same views: the native engines convert the Python
    dicts on first access, and that cost shows up only in the first selector."""
    views = _build_views(engine, prepared)
    cold, _ = timed(_evaluate_all, program, views)
    warm, _ = timed(_evaluate_all, program, views)
    per_device = 1e6 / max(count, 1)
    return {"S3 fresh views": cold * per_device, "S3 again": warm * per_device}


# --- feature probes -----------------------------------------------------------------------------


def measure_features(engine: Engine, *, cost_size: int | None = None) -> dict[str, Any]:
    """Each probe's outcome on the feature device, and the cost probe.

    ``cost_size`` overrides the engine's ``cost_probe_size`` (``--quick`` uses a small one)."""
    view = engine.view(feature_device())
    cases = {case.id: _probe(engine, case.expression, view) for case in CASES}
    size = cost_size or engine.cost_probe_size
    return {"cases": cases, "cost": _cost_probe(engine, view, size)}


def _probe(engine: Engine, expression: str, view: Any) -> dict[str, str]:
    try:
        program = engine.compile(expression)
    except CompileError as exc:
        return {"kind": "compile-error", "text": exc.message[:300]}
    outcome = program.evaluate(view)
    if outcome is True or outcome is False:
        return {"kind": "value", "text": json.dumps(outcome)}
    raw = getattr(outcome, "raw", "") or outcome.message
    return {"kind": "error", "text": outcome.message[:300], "raw": raw[:300]}


def _cost_probe(engine: Engine, view: Any, size: int) -> dict[str, Any]:
    """Compile and evaluate ``size ** 3`` iterations once, timed: what the engine does about
    an expensive selector (a cost limit, an iteration budget, or nothing)."""
    start = time.perf_counter()
    try:
        outcome = engine.compile(cost_expression(size)).evaluate(view)
        result = json.dumps(outcome) if outcome is True or outcome is False else f"error: {outcome.message}"
    except CompileError as exc:
        result = f"compile error: {exc.message}"
    seconds = time.perf_counter() - start
    return {"size": size, "iterations": size**3, "seconds": seconds, "result": result[:200]}
