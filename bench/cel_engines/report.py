"""The Markdown tables printed from the workers' results.

Each function takes ``{engine name: result}`` in run order (only the engines that produced a
result) and returns one table; cells are pre-formatted so the output can be pasted into docs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bench.cel_engines.workload import CASES, SELECTORS

__all__ = [
    "compile_table",
    "cost_table",
    "end_to_end_table",
    "features_table",
    "first_touch_table",
    "outcomes_table",
    "per_device_table",
    "selectors_table",
    "status_table",
]

Results = Mapping[str, Mapping[str, Any]]
#: the engine every relative figure is given against, when it ran
REFERENCE = "dra-extender"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> str:
    """``align`` has one letter per column: ``l`` or ``r``."""
    rule = ["---:" if a == "r" else "---" for a in align]
    lines = [_row(head), _row(rule)]
    lines += [_row(cells) for cells in rows]
    return "\n".join(lines)


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def selectors_table() -> str:
    rows = [[sid, f"`{_escape(expression)}`"] for sid, expression in SELECTORS.items()]
    return _table(["id", "selector"], rows, "ll")


def status_table(statuses: Mapping[str, tuple[str, str]]) -> str:
    """``{engine: (versions, status)}``."""
    rows = [[name, versions, _escape(status)] for name, (versions, status) in statuses.items()]
    return _table(["engine", "packages", "status"], rows, "lll")


def compile_table(results: Results) -> str:
    sids = list(SELECTORS)
    rows = [[name, *(f"{r['compile_us'][sid]:.1f}" for sid in sids)] for name, r in results.items()]
    return _table(["engine (compile µs)", *sids], rows, "l" + "r" * len(sids))


def per_device_table(results: Results) -> str:
    sids = list(SELECTORS)
    rows = []
    for name, r in results.items():
        evals = [r["eval_us"][sid] for sid in sids]
        total = r["view_us"] + sum(evals)
        rows.append([name, f"{r['view_us']:.2f}", *(f"{e:.2f}" for e in evals), f"{total:.1f}"])
    head = ["engine (µs per device)", "view", *(f"eval {sid}" for sid in sids), "view + 5 evals"]
    return _table(head, rows, "l" + "r" * (len(sids) + 2))


def end_to_end_table(results: Results) -> str:
    reference = results.get(REFERENCE, {}).get("end_to_end_s")
    rows = []
    for name, r in results.items():
        parts = (r["view_us"] + sum(r["eval_us"].values())) * r["devices"] / 1e6
        relative = f"{r['end_to_end_s'] / reference:.1f}x" if reference else "—"
        rows.append([name, str(r["devices"]), f"{parts:.3f}", f"{r['end_to_end_s']:.3f}", relative])
    head = ["engine", "devices", "sum of parts s", "end to end s", f"time / {REFERENCE}'s"]
    return _table(head, rows, "lrrrr")


def first_touch_table(results: Results) -> str:
    """S3 on fresh views vs again, and any engine-specific figures (µs per device)."""
    rows = []
    for name, r in results.items():
        touch = r["first_touch_us"]
        extra = "; ".join(f"{label}: {value:.2f}" for label, value in r["extra_us"].items()) or "—"
        rows.append([name, f"{touch['S3 fresh views']:.2f}", f"{touch['S3 again']:.2f}", extra])
    return _table(["engine (µs per device)", "S3 on fresh views", "S3 again", "other"], rows, "lrrl")


def outcomes_table(results: Results) -> str:
    """Per selector and engine: true, false, errors by text, and whether the counts of true,
    false and errors are those of the reference engine."""
    names = list(results)
    reference = REFERENCE if REFERENCE in results else (names[0] if names else "")
    rows = []
    for sid in SELECTORS:
        expected = _kinds(results[reference]["outcomes"][sid]) if reference else None
        for name, r in results.items():
            counts = r["outcomes"][sid]
            errors = "; ".join(f"{n}: {key[len('error: ') :]}" for key, n in counts.items() if key.startswith("error"))
            same = "yes" if _kinds(counts) == expected else "**DIFFERENT**"
            row = [sid, name, str(counts.get("true", 0)), str(counts.get("false", 0)), _escape(errors) or "—", same]
            rows.append(row)
    head = ["selector", "engine", "true", "false", "errors", f"counts as {reference}'s"]
    return _table(head, rows, "llrrll")


def _kinds(counts: Mapping[str, int]) -> tuple[int, int, int]:
    errors = sum(n for key, n in counts.items() if key.startswith("error"))
    return counts.get("true", 0), counts.get("false", 0), errors


def features_table(results: Results) -> str:
    names = list(results)
    rows = []
    for case in CASES:
        cells = [_feature_cell(results[name]["cases"].get(case.id)) for name in names]
        rows.append([case.id, f"`{_escape(case.expression)}`", _escape(case.expected), *cells])
    return _table(["id", "expression", "cel-go / Kubernetes", *names], rows, "lll" + "l" * len(names))


def _feature_cell(probe: Mapping[str, str] | None) -> str:
    if probe is None:
        return "?"
    text = _escape(probe["text"])
    if probe["kind"] == "value":
        return text
    prefix = "CE" if probe["kind"] == "compile-error" else "ERR"
    return f"{prefix}: {text[:90]}"


def cost_table(results: Results) -> str:
    rows = []
    for name, r in results.items():
        cost = r["cost"]
        # Per iteration only for a probe that ran to the end: a stopped one did fewer.
        finished = cost["result"] in ("true", "false")
        per_iteration = f"{cost['seconds'] / cost['iterations'] * 1e6:.2f}" if finished else "— (stopped)"
        size = f"{cost['size']}³ = {cost['iterations']:,}"
        rows.append([name, size, f"{cost['seconds']:.3f}", per_iteration, _escape(cost["result"])])
    return _table(["engine", "iterations", "seconds", "µs / iteration", "result"], rows, "lrrrl")
