"""The cluster generator (bench/cluster_gen.py): its manifests load through the embedded backend
(YAML, JSON and directory output), every pod's claims resolve (template claims created by the
backend's claim controller, direct and shared claims present), partitionable and network-attached
pools reach the nodes they should, unschedulable pods fit nowhere, and the output is deterministic."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from bench import cluster_gen as gen
from extender.backends.embedded import EmbeddedBackend
from extender.core.model import Features
from extender.state.claims import resolve_pod_claims
from extender.state.ledger import InFlightLedger
from extender.state.service import SchedulingService

SPEC = gen.ClusterSpec(nodes=12, devices=4, nics=2, partitionable=0.25, network_pools=3, pods=60, unschedulable=0.1)


@pytest.fixture(scope="module")
def objects() -> list[dict[str, Any]]:
    return gen.generate(SPEC)


def test_same_spec_same_cluster_and_uids(objects: list[dict[str, Any]]) -> None:
    assert gen.generate(SPEC) == objects
    other = gen.generate(gen.ClusterSpec(**{**SPEC.__dict__, "seed": 1}))
    assert [p["metadata"]["uid"] for p in gen.pods_of(other)] != [p["metadata"]["uid"] for p in gen.pods_of(objects)]


def test_counts_and_mix(objects: list[dict[str, Any]]) -> None:
    kinds = Counter(o["kind"] for o in objects)
    assert kinds["Node"] == 12 and kinds["Pod"] == 60
    # 9 plain GPU slices + 3 partitionable nodes x 2 slices + 12 NIC slices + 3 rack pools
    assert kinds["ResourceSlice"] == 9 + 6 + 12 + 3
    mixes = Counter(p["metadata"]["labels"][gen.MIX_LABEL] for p in gen.pods_of(objects))
    assert set(mixes) == {"template", "direct", "shared", "unschedulable"}
    uids = [o["metadata"]["uid"] for o in objects if "uid" in o["metadata"]]
    assert len(uids) == len(set(uids))


@pytest.mark.parametrize("name", ["cluster.json", "cluster.yaml", "dir"])
def test_written_manifests_load_and_every_pod_resolves_its_claims(
    objects: list[dict[str, Any]], tmp_path: Path, name: str
) -> None:
    files = gen.write(objects, str(tmp_path / name))
    assert all(f.stat().st_size > 0 for f in files)
    backend = EmbeddedBackend.from_paths(*files)
    store = backend.store
    assert backend.controller_errors == []
    assert len(store.nodes) == 12 and len(store.pods) == 60
    ledger = InFlightLedger()
    for raw in store.pods.values():
        claims = resolve_pod_claims(raw, store, ledger)
        assert claims.all, raw["metadata"]["name"]
        assert claims.to_allocate == claims.all  # nothing allocated yet


def test_pools_reach_the_right_nodes(objects: list[dict[str, Any]]) -> None:
    backend = EmbeddedBackend(objects)
    snapshot = backend.store.snapshot()
    drivers_per_node = {
        name: Counter(entry.id.driver for entry in snapshot.node_view(backend.store.node(name), Features()).devices)
        for name in backend.store.nodes
    }
    # Every 4th node is partitionable: 4 GPUs x (whole + 9 partitions); the others 4 whole GPUs.
    assert drivers_per_node["node-00003"][gen.GPU_DRIVER] == 40
    assert drivers_per_node["node-00000"][gen.GPU_DRIVER] == 4
    # Each node sees its 2 NICs and its rack's 4 network-attached devices.
    assert all(c[gen.NIC_DRIVER] == 2 and c[gen.FABRIC_DRIVER] == 4 for c in drivers_per_node.values())


def test_schedulable_pods_fit_somewhere_and_unschedulable_ones_nowhere(objects: list[dict[str, Any]]) -> None:
    service = SchedulingService(backend=EmbeddedBackend(objects))
    nodes = sorted(service.store.nodes)
    for pod in gen.pods_of(objects):
        outcome = service.filter(pod, nodes)
        assert outcome.error == "", (pod["metadata"]["name"], outcome.error)
        unschedulable = pod["metadata"]["labels"][gen.MIX_LABEL] == "unschedulable"
        assert bool(outcome.node_names) != unschedulable, pod["metadata"]["name"]


def test_mig_pods_fit_only_partitionable_nodes(objects: list[dict[str, Any]]) -> None:
    service = SchedulingService(backend=EmbeddedBackend(objects))
    mig = [p for p in gen.pods_of(objects) if p["metadata"]["labels"][gen.SHAPE_LABEL] == "mig-slice"]
    assert mig
    outcome = service.filter(mig[0], sorted(service.store.nodes))
    assert outcome.node_names == ["node-00003", "node-00007", "node-00011"]


def test_cli_writes_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "c.json"
    assert gen.main(["--nodes", "3", "--devices", "2", "--pods", "5", "--mix", "direct", "--out", str(out)]) == 0
    assert "3 Node" in capsys.readouterr().out
    backend = EmbeddedBackend.from_paths(out)
    assert len(backend.store.pods) == 5 and len(backend.store.claims) == 5


def test_cli_rejects_an_unknown_suffix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert gen.main(["--nodes", "1", "--out", str(tmp_path / "c.txt")]) == 2
    assert "give a .json" in capsys.readouterr().err
