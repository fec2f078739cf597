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
from extender.state.cache.claims import resolve_pod_claims
from extender.state.cache.ledger import InFlightLedger
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


# --- pool layout within the API's per-slice limits -------------------------------------------------------


def _pools_of(objects: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    pools: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for o in objects:
        if o["kind"] == "ResourceSlice":
            pools.setdefault((o["spec"]["driver"], o["spec"]["pool"]["name"]), []).append(o)
    return pools


def _gpu_pool(objects: list[dict[str, Any]], node: str) -> Any:
    backend = EmbeddedBackend(objects)
    assert backend.controller_errors == []
    view = backend.store.snapshot().node_view(backend.store.node(node), Features())
    # Counter-only slices are relevant to every node: the other nodes' pools show up too, without devices.
    (pool,) = [p for p in view.pools if p.driver == gen.GPU_DRIVER and p.name == node]
    assert all(p.usable and not p.entries for p in view.pools if p.name != node), node
    return pool


@pytest.mark.parametrize("devices", [8, 9, 10, 16, 64])
def test_partitionable_pools_stay_within_the_slice_limits_and_load_complete_and_valid(devices: int) -> None:
    # Before: one slice held every counter set (at most 8 allowed) and one every device (at most 64 when
    # they consume counters): from 7 GPUs on, a partitionable node's pool was invalid, without devices.
    objects = gen.generate(gen.ClusterSpec(nodes=2, devices=devices, nics=0, partitionable=1))
    for node in ("node-00000", "node-00001"):
        pool = _gpu_pool(objects, node)
        assert not pool.incomplete and pool.invalid_reason is None, pool.invalid_reason
        assert len(pool.counter_sets) == devices
        types = Counter(e.device.attributes["type"] for e in pool.entries)
        assert types == {"gpu": devices, "mig": devices * 9}
        profiles = Counter(e.device.attributes["profile"] for e in pool.entries if "profile" in e.device.attributes)
        assert profiles == {"3g.40gb": devices * 2, "1g.10gb": devices * 7}
    for (driver, name), slices in _pools_of(objects).items():
        assert driver == gen.GPU_DRIVER
        # Counter sets in counter-only slices, devices in device slices: ceil(n/8) + ceil(n/6) slices.
        assert len(slices) == -(-devices // 8) + -(-devices // 6)
        assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {len(slices)}
        assert len({s["metadata"]["name"] for s in slices}) == len(slices)
        for s in slices:
            spec = s["spec"]
            assert spec["nodeName"] == name
            assert ("devices" in spec) != ("sharedCounters" in spec)
            assert len(spec.get("sharedCounters", ())) <= 8
            assert len(spec.get("devices", ())) <= 64
            assert all(len(d["consumesCounters"]) <= 2 for d in spec.get("devices", ()))


@pytest.mark.parametrize("devices", [8, 9, 10, 16, 64])
def test_partitions_are_allocatable_on_big_partitionable_nodes(devices: int) -> None:
    spec = gen.ClusterSpec(
        nodes=2, devices=devices, nics=0, partitionable=1, pods=1, mix={"direct": 1}, shapes={"mig-slice": 1}
    )
    objects = gen.generate(spec)
    # Also a partition of the last GPU: a device of the last device slice consuming a counter set of
    # the last counter slice.
    last = f'device.attributes["{gen.GPU_DRIVER}"].index == {devices - 1}'
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "last-gpu", "namespace": "default", "uid": "00000000-0000-4000-8000-000000000001"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "slice",
                        "exactly": {
                            "deviceClassName": "mig.example.com",
                            "count": 2,
                            "selectors": [{"cel": {"expression": last}}],
                        },
                    }
                ]
            }
        },
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "last-gpu", "namespace": "default", "uid": "00000000-0000-4000-8000-000000000002"},
        "spec": {"containers": [{"name": "main"}], "resourceClaims": [{"name": "d", "resourceClaimName": "last-gpu"}]},
    }
    service = SchedulingService(backend=EmbeddedBackend([*objects, claim, pod]))
    nodes = sorted(service.store.nodes)
    for p in [*gen.pods_of(objects), pod]:
        outcome = service.filter(p, nodes)
        assert outcome.error == "" and outcome.node_names == nodes, (p["metadata"]["name"], outcome.error)


def test_plain_pools_past_128_devices_split_into_slices() -> None:
    objects = gen.generate(gen.ClusterSpec(nodes=1, devices=129, nics=130, network_pools=1, fabric_devices=200))
    pools = _pools_of(objects)
    assert {key: len(slices) for key, slices in pools.items()} == {
        (gen.GPU_DRIVER, "node-00000"): 2,
        (gen.NIC_DRIVER, "node-00000"): 2,
        (gen.FABRIC_DRIVER, "rack-000"): 2,
    }
    assert all(len(s["spec"]["devices"]) <= 128 for slices in pools.values() for s in slices)
    backend = EmbeddedBackend(objects)
    view = backend.store.snapshot().node_view(backend.store.node("node-00000"), Features())
    assert {p.driver: (p.usable, len(p.entries)) for p in view.pools} == {
        gen.GPU_DRIVER: (True, 129),
        gen.NIC_DRIVER: (True, 130),
        gen.FABRIC_DRIVER: (True, 200),
    }


def test_pools_that_fit_one_slice_keep_their_layout() -> None:
    # Benchmarks compare runs: up to 6 partitionable GPUs (60 devices) the layout is the old one.
    objects = gen.generate(gen.ClusterSpec(nodes=1, devices=6, nics=1, partitionable=1))
    names = [
        (s["metadata"]["name"], s["spec"]["pool"]["resourceSliceCount"])
        for s in objects
        if s["kind"] == "ResourceSlice"
    ]
    assert names == [
        ("node-00000-gpu.example.com-counters", 2),
        ("node-00000-gpu.example.com-devices", 2),
        ("node-00000-nic.example.com", 1),
    ]
