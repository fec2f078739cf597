"""The ``dra-extender allocate`` command over the shipped demo cluster and bad inputs.

Runs ``extender.cli.main`` in-process; the server commands are tested with the server.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from extender.cli import main
from extender.core.answers import NO_CLASS_DEVICES

DEMO = Path(__file__).resolve().parents[1] / "deploy" / "examples" / "demo-cluster.yaml"


def test_demo_claim_fits_on_the_h100_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["allocate", str(DEMO), "--claim", "default/two-gpus", "--json"]) == 0
    report = {entry["node"]: entry for entry in json.loads(capsys.readouterr().out)}
    assert report["node-1"]["fits"] is False  # A100s: 40Gi, the class wants 80Gi
    # What the filter answers there: no device of the class on the node, so unresolvable.
    assert report["node-1"]["message"] == NO_CLASS_DEVICES
    assert report["node-1"]["unresolvable"] == NO_CLASS_DEVICES
    assert report["node-2"]["fits"] is True
    results = report["node-2"]["claims"]["default/two-gpus"]["devices"]["results"]
    # gpu-0..3 of node-2 are held by the allocated training-job claim; gpu-4/5 share a PCIe root
    assert [r["device"] for r in results] == ["gpu-4", "gpu-5"]


def test_text_report_names_devices(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["allocate", str(DEMO), "--claim", "any-gpu", "--node", "node-3"]) == 0
    out = capsys.readouterr().out
    assert "node-3: fits" in out
    assert "default/any-gpu gpu/h100 -> gpu.example.com/node-3/gpu-0" in out


def test_unknown_claim_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["allocate", str(DEMO), "--claim", "default/nope"]) == 2
    assert "claim default/nope not found" in capsys.readouterr().err


def test_malformed_manifest_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: ResourceClaim\nmetadata: [not, a, mapping]\n")
    assert main(["allocate", str(bad), "--claim", "x"]) == 2
    assert "error:" in capsys.readouterr().err


def test_fits_nowhere_exits_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    claim = tmp_path / "claim.yaml"
    claim.write_text(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: nine, namespace: default}\n"
        "spec: {devices: {requests: [{name: gpus, exactly: {deviceClassName: gpu.example.com, count: 9}}]}}\n"
    )
    assert main(["allocate", str(DEMO), str(claim), "--claim", "nine"]) == 1
    assert "needs 9" in capsys.readouterr().out


def test_allocate_names_the_pods_that_would_have_to_go(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/preemption.md's cluster: for a pod of priority 1000, batch-1 would go (batch-2's
    PodDisruptionBudget spares it); for priority 100, nobody can."""
    cluster = str(Path(__file__).parent.parent / "docs" / "examples" / "preemption-cluster.yaml")
    assert main(["allocate", cluster, "--claim", "urgent-gpu", "--priority", "1000", "--json"]) == 1
    [node] = json.loads(capsys.readouterr().out)
    assert node["victims"] == [{"pod": "default/batch-1", "priority": 100}]
    assert main(["allocate", cluster, "--claim", "urgent-gpu", "--priority", "100"]) == 1
    assert "preemption: no set of lower-priority pods frees enough devices" in capsys.readouterr().out


def test_a_gang_barrier_longer_than_a_binds_writes_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--demo", "--gang-barrier-seconds", "20"]) == 2
    assert "--gang-barrier-seconds (20) must be below a bind's time for its writes (20 s" in capsys.readouterr().err
