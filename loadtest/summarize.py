"""Summarise a locust run: one Markdown row per request name, then the totals.

    python loadtest/summarize.py out            # reads out_stats.csv (locust --csv out)
    python loadtest/summarize.py out_stats.csv
    python loadtest/summarize.py out.json       # locust --json-file out: the final stats, exactly

locust rewrites its CSV once a second while it runs, so a run that ends between two writes leaves
the CSV up to a second behind; the JSON file is written once, at the end, with everything.

Columns: requests, failures, p50 / p95 / p99 in ms, requests/s. ``POD`` rows are the load test's
scheduling outcomes (scheduled, unschedulable, requeued), not HTTP requests; the totals count HTTP
requests only. Exits 1 when a request failed, so scripts can check a run.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["main", "read_json_stats", "read_stats", "summary"]

_COLUMNS = ("Request Count", "Failure Count", "50%", "95%", "99%", "Requests/s")


def read_stats(path: Path) -> list[dict[str, str]]:
    """The rows of a locust ``*_stats.csv`` file (the ``Aggregated`` row included)."""
    with path.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    missing = [c for c in ("Type", "Name", *_COLUMNS) if rows and c not in rows[0]]
    if missing:
        raise ValueError(f"{path}: not a locust stats CSV (missing columns {', '.join(missing)})")
    return rows


def read_json_stats(path: Path) -> list[dict[str, str]]:
    """The entries of a locust ``--json-file`` document as rows shaped like the CSV's."""
    document = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(document, list) or not all(isinstance(e, dict) and "num_requests" in e for e in document):
        raise ValueError(f"{path}: not a locust --json-file document (a list of request stats)")
    rows = []
    for entry in document:
        times = {float(ms): int(count) for ms, count in dict(entry.get("response_times") or {}).items()}
        seconds = float(entry.get("last_request_timestamp") or 0) - float(entry.get("start_time") or 0)
        count = int(entry["num_requests"])
        row = {"Type": str(entry.get("method") or ""), "Name": str(entry.get("name") or "")}
        row["Request Count"], row["Failure Count"] = str(count), str(int(entry.get("num_failures") or 0))
        for percent in (50, 95, 99):
            row[f"{percent}%"] = _percentile(times, percent / 100)
        row["Requests/s"] = f"{count / seconds:.3f}" if seconds > 0 else "0"
        rows.append(row)
    return rows


def _percentile(times: dict[float, int], fraction: float) -> str:
    """The response time (ms, as locust rounds it) below which ``fraction`` of the requests fall."""
    total = sum(times.values())
    if not total:
        return "N/A"
    seen = 0
    for ms in sorted(times):
        seen += times[ms]
        if seen >= fraction * total:
            return f"{ms:g}"
    return f"{max(times):g}"


def _number(text: str) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return 0.0


def summary(rows: Sequence[dict[str, str]]) -> tuple[str, int]:
    """(the Markdown text, the number of failed HTTP requests)."""
    lines = [
        "| type | name | requests | failures | p50 ms | p95 ms | p99 ms | req/s |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    http_requests = failures = 0
    http_rps = 0.0
    for row in rows:
        if row["Name"] == "Aggregated":
            continue
        count, failed = int(_number(row["Request Count"])), int(_number(row["Failure Count"]))
        if row["Type"] != "POD":
            http_requests += count
            failures += failed
            http_rps += _number(row["Requests/s"])
        lines.append(
            f"| {row['Type']} | {row['Name']} | {count} | {failed} | {row['50%']} | {row['95%']} | {row['99%']} "
            f"| {_number(row['Requests/s']):.1f} |"
        )
    lines.append("")
    lines.append(f"HTTP requests: {http_requests}, failures: {failures}, requests/s: {http_rps:.1f}")
    return "\n".join(lines), failures


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python loadtest/summarize.py PREFIX | PREFIX_stats.csv | FILE.json", file=sys.stderr)
        return 2
    path = Path(args[0])
    if not path.name.endswith(("_stats.csv", ".json")):
        path = path.with_name(path.name + "_stats.csv")
    try:
        rows = read_json_stats(path) if path.suffix == ".json" else read_stats(path)
        text, failures = summary(rows)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(text)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
