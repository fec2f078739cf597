"""Smoke test of ``python -m bench.allocator --quick``: it runs in-process and prints its header
and a Markdown table with every scenario. Timings are not checked (they are never asserted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import allocator as bench


def test_quick_bench_prints_a_table(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out_file = tmp_path / "rows.json"
    assert bench.main(["--quick", "--repeat", "1", "--json", str(out_file)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("Python ") and "cel-python" in lines[0]
    assert "| scenario | n | best ms | median ms | µs/item | search steps | target |" in lines
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| scenario")]
    scenarios = {row.split("|")[1].strip() for row in rows}
    assert {"filter warm", "filter cold", "CEL cold 5 selectors", "CEL warm lookups"} <= scenarios
    document = json.loads(out_file.read_text())
    assert len(document["rows"]) == len(rows)
    # Filter rows carry the allocator's deterministic step counter; other rows have none.
    for row in document["rows"]:
        assert isinstance(row["search_steps"], int) == row["scenario"].startswith("filter ")
