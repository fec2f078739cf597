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


def test_quick_pipeline_runs_the_three_processes(tmp_path: Path) -> None:
    """``python -m bench.pipeline --quick``: the model, the fake API server and the extender, each
    in its own process as the benchmark runs them, then its table from the JSON it wrote."""
    import subprocess
    import sys

    out_file = tmp_path / "results.json"
    root = Path(__file__).resolve().parents[1]
    command = [sys.executable, "-m", "bench.pipeline", "--quick", "--backends", "kube,embedded"]
    # holds that outlast any gap to their pod's bind: the counts below must not depend on how
    # loaded this machine is (the default 2 s is the production figure, not the test's point)
    command += ["--extender-arg=--hold-seconds=60", "--json", str(out_file)]
    done = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| backend | nodes x devices |" in done.stdout
    results = json.loads(out_file.read_text())["results"]
    assert {(r["backend"], r["workload"]["nodes"]) for r in results} == {
        (backend, nodes) for backend in ("kube", "embedded") for nodes in (20, 50)
    }
    for r in results:
        assert r["report"]["bound"] == r["report"]["pods"] and r["report"]["failed_attempts"] == {}
        assert r["server_cpu_ms_per_pod"] > 0
        if r["backend"] == "kube":
            assert r["api_requests_per_pod_total"] == 3.0 and r["fake_cpu_ms_per_pod"] > 0
            assert r["extender"]["holds placed"] == r["report"]["pods"]


def test_quick_loop_stall_prints_its_table(capsys: pytest.CaptureFixture[str]) -> None:
    from bench import loop_stall

    assert loop_stall.main(["--quick"]) == 0
    table = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]  # logs aside
    assert table[0].startswith("| mode | slice ms | search s | /healthz answered |")
    assert [line.split("|")[1].strip() for line in table[2:]] == ["blocking", "thread"] + ["cooperative"] * 4


def test_quick_sampled_stream_prints_cpu_per_verb() -> None:
    """``python -m bench.sampled_stream --quick`` (its own process: it silences the service's logs
    globally): every pod bound, a row per verb and the total."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-m", "bench.sampled_stream", "--quick"], cwd=root, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split("|")[1:-1] for line in done.stdout.splitlines() if line.startswith("| 40 ")]
    assert [cells[4].strip() for cells in rows] == ["filter", "prioritize", "bind", "total"]
    assert all(cells[3].strip() == "40" for cells in rows)  # every pod bound


def test_sampled_stream_with_picks_never_prioritizes() -> None:
    """``--filter-picks-node``: the filter names one node for each pod, so no prioritize is sent,
    and every pod is bound all the same; without it every pod is prioritized."""
    from bench.sampled_stream import run_stream

    picked = run_stream(40, 4, 40, 10, seed=1, picks=True)
    scored = run_stream(40, 4, 40, 10, seed=1, picks=False)
    assert (picked.bound, picked.prioritized) == (40, 0)
    assert (scored.bound, scored.prioritized) == (40, 40)


def test_connections_bench_serves_each_mode_and_prints_its_table(capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m bench.connections`` with a few requests: the extender served plain and with
    client certificates (certificates it made), each reached over kept and new connections (a
    refused handshake or a non-200 answer raises), and one table row per mode."""
    from bench import connections

    assert connections.main(["--requests", "3", "--modes", "http,mtls", "--keys", "ec"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("Python ") and "SSL" in lines[0]
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| mode")]
    assert [row.split("|")[1].strip() for row in rows] == ["plain HTTP", "HTTPS, client certificates (`deploy/tls`)"]
    assert all(row.split("|")[3].strip() == "3" for row in rows)


def test_the_connections_bench_refuses_what_it_cannot_measure() -> None:
    from bench import connections

    for argv in (["--requests", "0"], ["--modes", "h2"], ["--keys", "dsa"]):
        with pytest.raises(SystemExit):
            connections.main(argv)
