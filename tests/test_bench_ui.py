"""Smoke test of ``python -m bench.ui --quick``: it serves a small generated cluster, binds pods over
HTTP, and prints its table with a row per device-map request. Timings are not checked (they are
never asserted); that every request was answered and measured after a change is."""

from __future__ import annotations

import pytest

from bench import ui as bench


def test_quick_ui_bench_prints_its_table(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[bench.Run] = []
    print_table = bench.print_table

    def keep(run: bench.Run) -> None:
        runs.append(run)
        print_table(run)

    monkeypatch.setattr(bench, "print_table", keep)
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
        assert all(float(cells[i]) >= 0 for i in range(1, 6)), cells  # every figure printed
        assert int(cells[6]) > 0
    # measured cold and after a bind: the figures as measured, not as printed (a fast machine's
    # tenth of a millisecond prints as 0.0)
    [run] = runs
    for row in run.rows:
        assert row.cold_ms > 0 and row.change_server_ms > 0, row
