"""Smoke test of ``python -m bench.ui --quick``: it serves a small generated cluster, binds pods over
HTTP, and prints its table with a row per device-map request. Timings are not checked (they are
never asserted); that every request was answered and measured after a change is."""

from __future__ import annotations

import pytest

from bench import ui as bench


def test_quick_ui_bench_prints_its_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--quick"]) == 0
    out = capsys.readouterr().out.splitlines()
    lines = out[next(i for i, line in enumerate(out) if line.startswith("Python ")) :]  # logs aside
    assert "40 nodes x 4 devices" in lines[1]
    header = "| request | cold ms | warm server ms | warm latency ms | after a bind: server ms | latency ms | bytes |"
    assert header in lines
    rows = [line.split("|")[1:-1] for line in lines if line.startswith("| ") and not line.startswith("| request")]
    measured = {cells[0].strip(): cells for cells in rows}
    assert {name for name, _ in bench.REQUESTS} < set(measured)
    for name, _ in bench.REQUESTS:
        cells = [c.strip() for c in measured[name]]
        assert float(cells[1]) > 0 and float(cells[4]) > 0, cells  # cold, and after a bind
        assert int(cells[6]) > 0
