"""Smoke test of ``python -m bench.cel_engines --quick`` for the engines that are always installed
(the project's package and celpy's stock CompiledRunner; the others need the ``celengines``
extra). It checks that the tables are printed and that both engines give the same counts of
true, false and errors for every selector; error texts may differ (celpy's plain dicts have no
unknown-domain default, so it names the domain where cel-go names the attribute). Timings are
never checked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.cel_engines import cli
from bench.cel_engines.registry import EngineInfo
from bench.cel_engines.workload import SELECTORS

ENGINES = ("dra-extender", "celpy-compiled")
ROOT = Path(__file__).resolve().parents[1]


def _kinds(counts: dict[str, int]) -> tuple[int, int, int]:
    errors = sum(n for key, n in counts.items() if key.startswith("error"))
    return counts.get("true", 0), counts.get("false", 0), errors


def test_quick_run_prints_the_tables_and_the_engines_agree(tmp_path: Path) -> None:
    out_file = tmp_path / "engines.json"
    command = [sys.executable, "-m", "bench.cel_engines", "--quick", "--engines", ",".join(ENGINES)]
    command += ["--json", str(out_file)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("Python ") and "CPUs" in lines[0] and "cel-python 0.5.0" in lines[0]
    for head in (
        "| engine (compile µs) | S1 | S2 | S3 | S4 | S5 |",
        "| engine (µs per device) | view | eval S1 | eval S2 | eval S3 | eval S4 | eval S5 | view + 5 evals |",
        "| engine | devices | sum of parts s | end to end s | time / dra-extender's |",
        "| selector | engine | true | false | errors | counts as dra-extender's |",
    ):
        assert head in lines
    outcome_rows = [line for line in lines if line.startswith("| S") and line.split("|")[2].strip() in ENGINES]
    assert len(outcome_rows) == len(SELECTORS) * len(ENGINES)
    assert all(row.rstrip(" |").endswith("yes") for row in outcome_rows), "\n".join(outcome_rows)

    engines = json.loads(out_file.read_text())["engines"]
    assert [engines[name]["status"] for name in ENGINES] == ["ok", "ok"]
    for sid in SELECTORS:
        ours, celpy = (engines[name]["speed"]["outcomes"][sid] for name in ENGINES)
        assert _kinds(ours) == _kinds(celpy), sid
        assert sum(ours.values()) == engines["dra-extender"]["speed"]["devices"] == 200


def test_an_engine_that_is_not_installed_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    absent = EngineInfo("absent", "no.such.module:Engine", ("no-such-distribution-for-this-test",), (), "pip install x")
    monkeypatch.setitem(cli.ENGINES, "absent", absent)
    settings, _ = cli.parse(["--quick", "--engines", "absent"])
    run = cli.run_engine("absent", settings)
    assert run.status.startswith("not installed (no-such-distribution-for-this-test)")
    assert run.results == {}
