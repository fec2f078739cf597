"""What the benchmark scripts share: percentiles, free ports, a process's CPU, a sizes argument,
the checkout whose extender runs."""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Sequence
from pathlib import Path

__all__ = ["ROOT", "ROOT_ENV", "cpu_seconds", "extender_root", "free_port", "percentile", "positive_ints"]

#: This checkout.
ROOT = Path(__file__).resolve().parents[1]
#: Set to another checkout of the repository, the extender subprocess of every benchmark runs that
#: code (the "before" side of a side-by-side run); the bench, the model, the fake API server and
#: the control plane stay this checkout's.
ROOT_ENV = "BENCH_EXTENDER_ROOT"


def extender_root() -> Path:
    """The checkout whose extender the benchmarks run: ``BENCH_EXTENDER_ROOT``, else this one."""
    root = os.environ.get(ROOT_ENV)
    if not root:
        return ROOT
    path = Path(root).resolve()
    if not (path / "extender" / "__main__.py").is_file():
        raise SystemExit(f"{ROOT_ENV}={root}: not a checkout of dra-extender (no extender/__main__.py)")
    return path


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (0.0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far, from /proc/PID/stat (0.0 where /proc is missing)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    # after the command name: state is field 3, utime and stime are fields 14 and 15 (1-based)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def positive_ints(text: str) -> list[int]:
    """An argparse type: ``100,500`` -> [100, 500]."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text}: give numbers like 100,500") from exc
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text}: give positive numbers")
    return values
