"""Smoke test of ``python -m bench.pipeline --scheduler real`` (``bench/real_scheduler.py``): a tiny
cluster on a real control plane, the in-tree and the extender profile side by side. It needs the
binaries (``KUBEBUILDER_ASSETS``, docs/testing.md) and skips with the reason without them. Counts
and correctness are checked; timings never are."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.controlplane.assets import assets_or_skip

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module", autouse=True)
def binaries() -> None:
    assets_or_skip("real-scheduler benchmark")


def test_a_tiny_real_scheduler_run_binds_every_pod_in_both_profiles(tmp_path: Path) -> None:
    out_file = tmp_path / "real.json"
    command = [sys.executable, "-m", "bench.pipeline", "--scheduler", "real", "--sizes", "5", "--devices", "2"]
    command += ["--pods", "6", "--claims", "direct,template", "--json", str(out_file)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "| workload | in-tree pods/s | extender pods/s | ratio |" in done.stdout
    assert "| 5 nodes, direct claims (6 pods) |" in done.stdout
    assert "| 5 nodes, template claims (6 pods) |" in done.stdout
    document = json.loads(out_file.read_text())
    assert document["scheduler"] == "real"
    runs = document["results"]
    assert [(r["profile"], r["workload"]["claims"]) for r in runs] == [
        ("in-tree", "direct"),
        ("extender", "direct"),
        ("in-tree", "template"),
        ("extender", "template"),
    ]
    for r in runs:
        assert r["bound"] == r["pods"] == 6, r
        assert r["problems"] == [], r["problems"]
        assert r["attempts"].get("scheduled") == 6, r["attempts"]
        assert r["cpu_s"]["kube-apiserver"] >= 0 and "kube-scheduler" in r["cpu_s"]
        assert ("dra-extender" in r["cpu_s"]) == (r["profile"] == "extender")


def test_the_real_kube_scheduler_runs_the_large_cluster_variant(tmp_path: Path) -> None:
    """deploy/large-cluster's KubeSchedulerConfiguration (a node sample, some scores off) is one the real
    kube-scheduler v1.36 accepts (it decodes strictly) and schedules with: every pod bound, every claim
    correct, no failed attempt on an empty cluster. Its extender runs with ``--filter-picks-node``: the
    filter names one node per pod, so the real kube-scheduler never calls prioritize."""
    out_file = tmp_path / "large.json"
    command = [sys.executable, "-m", "bench.pipeline", "--scheduler", "real", "--sizes", "5", "--devices", "2"]
    command += ["--pods", "6", "--claims", "direct", "--profiles", "extender", "--extender-config", "large-cluster"]
    command += ["--json", str(out_file)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (run,) = json.loads(out_file.read_text())["results"]
    assert (run["profile"], run["config"]) == ("extender", "large-cluster")
    assert run["bound"] == run["pods"] == 6 and run["problems"] == []
    assert run["attempts"].get("scheduled") == 6 and sum(run["attempts"].values()) == 6
    assert "filter" in run["extender_verbs_ms"] and "bind" in run["extender_verbs_ms"]
    assert "prioritize" not in run["extender_verbs_ms"], run["extender_verbs_ms"]
