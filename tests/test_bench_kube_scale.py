"""Smoke test of ``python -m bench.kube_scale`` (one replica against a real API server, issue 26):
a tiny cluster, every phase run once. It needs the binaries (``KUBEBUILDER_ASSETS``, docs/testing.md)
and skips with the reason without them. What the answers say is checked; timings never are."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.kube_scale import NEW_SHAPES, Result, table
from tests.controlplane.assets import assets_or_skip

ROOT = Path(__file__).resolve().parents[1]


def test_the_table_names_every_phase() -> None:
    result = Result(nodes=3, devices_per_node=4, objects=10, ready_s=1.5, warm_up_ms=200.0)
    result.list_ms = {"nodes": 100.0, "resourceslices.resource.k8s.io": 300.0}
    result.filter_ms = {"p50": 1.0, "p99": 2.0, "max": 2.5, "n": 5}
    result.prioritize_ms = {"p50": 1.5, "p99": 2.5, "max": 3.0, "n": 5}
    result.new_shapes = {"two-gpus": (10.0, 5.0, 3)}
    text = table(result)
    assert text.startswith("| 3 nodes x 4 devices | |")
    assert "longest LISTs: resourceslices.resource.k8s.io 0.3 s, nodes 0.1 s; warm-up 0.2 s" in text
    assert "| new shape two-gpus | filter 10 + prioritize 5 = 15.0 ms (3 nodes fit) |" in text
    assert "| warm filter, 3 names (n=5) | p50 1.0 / p99 2.0 / max 2.5 ms |" in text


def test_a_tiny_run_answers_every_shape_on_a_real_api_server(tmp_path: Path) -> None:
    assets_or_skip("kube-scale benchmark")
    out_file = tmp_path / "scale.json"
    command = [sys.executable, "-m", "bench.kube_scale", "--nodes", "6", "--gpus", "8", "--nics", "1"]
    command += ["--requests", "3", "--json", str(out_file)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "| 6 nodes x 9 devices | |" in done.stdout
    document = json.loads(out_file.read_text())
    assert document["objects"] == 5 + 6 * 3  # classes, then per node the Node and two slices
    assert document["filter_ms"]["n"] == document["prioritize_ms"]["n"] == 3
    assert set(document["new_shapes"]) == {name for name, _ in NEW_SHAPES}
    fits = {name: fit for name, (_, _, fit) in document["new_shapes"].items()}
    assert fits["two-gpus"] == fits["four-gpus-one-numa"] == fits["gpu-and-nic-one-root"] == 6
    assert document["rss_ready_mib"] > 0 and document["start_probes"] >= 0
    assert "resourceslices.resource.k8s.io" in document["list_ms"] and document["warm_up_ms"] > 0
