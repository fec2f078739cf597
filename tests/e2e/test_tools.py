"""The tools against the live cluster: ``kubectl-dra`` (the console script, in processes of its
own, as kubectl runs the plugin) reading the API server with an admin's kubeconfig and reading the
replica's extender, and the extender's ``/debug`` endpoints, each held to what the API server holds.

One cluster for the module: two nodes with three GPUs between them (two and one), a pod bound with
a claim of its own, a pod bound with a claim made from a template, and a pod that fits nowhere (it
wants four GPUs on one node). Which node each bound pod got is the scheduler's choice: the expected
answers are built from the API server's objects, not assumed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.controlplane.api import eventually
from tests.controlplane.cluster import ControlPlane
from tests.e2e.harness import ROOT, V1, Deployment, Pair, Scenario
from tests.e2e.harness import scenario as new_scenario

CANNOT_ALLOCATE = "cannot allocate all claims"
NO_DEVICES = "no devices of the requested device classes on the node"
#: A bound against a hang only (the plugin lists six kinds and explains in a few seconds).
PLUGIN_TIMEOUT = 180.0


@dataclass
class Cluster:
    scenario: Scenario
    nodes: list[str]
    extender: str
    kubeconfig: Path

    @property
    def namespace(self) -> str:
        return self.scenario.namespace


@dataclass
class Run:
    argv: Sequence[str]
    code: int
    out: str
    err: str

    def json(self) -> Any:
        assert self.code == 0, f"{' '.join(self.argv)}: exit {self.code}: {self.err}"
        return json.loads(self.out)


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane, deployment: Deployment, replica: Pair) -> Iterator[Cluster]:
    with new_scenario(deployment) as s:
        nodes = s.nodes(2)
        gpu = s.device_class()
        s.gpus(nodes[0], 2)
        s.gpus(nodes[1], 1)
        s.claim("one", gpu)
        s.pod("runner", "one")
        s.template("gpu", gpu)
        s.pod("templated", templates=["gpu"])
        for pod in ("runner", "templated"):
            s.bound(pod)
        # the pod that fits nowhere comes once the extender holds every device, so that its first
        # attempt (the FailedScheduling event) is answered from the whole cluster
        extender = replica.extender
        eventually(
            lambda: [len(extender.get(f"/debug/nodes/{n}")["devices"]) for n in nodes] == [2, 1],
            what="the extender holding the scenario's devices",
        )
        s.claim("four", gpu, count=4)
        s.pod("stuck", "four")
        s.event("stuck", "FailedScheduling")
        kubeconfig = control_plane.kubeconfig("admin-kubectl", "admin", "system:masters")
        yield Cluster(s, nodes, extender.url, kubeconfig)


def plugin_command() -> list[str]:
    script = Path(sys.executable).parent / "kubectl-dra"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from extender.kubectl import main; sys.exit(main())"]


def run_plugin(*commands: Sequence[str]) -> list[Run]:
    """Each of ``commands`` (kubectl-dra's arguments) in a process of its own, all at once."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("KUBECONFIG", None)
    env.pop("KUBERNETES_SERVICE_HOST", None)
    processes = [
        (
            list(argv),
            subprocess.Popen(
                [*plugin_command(), *argv],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            ),
        )
        for argv in commands
    ]
    runs = []
    for argv, process in processes:
        try:
            out, err = process.communicate(timeout=PLUGIN_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate()
        runs.append(Run(argv, process.returncode, out, err))
    return runs


@pytest.fixture(scope="module")
def plugin(cluster: Cluster) -> dict[str, Run]:
    """The plugin's answers about the module's cluster, from both sources (run once, together)."""
    stuck = f"{cluster.namespace}/stuck"
    from_cluster = ["--kubeconfig", str(cluster.kubeconfig)]
    from_extender = ["--extender", cluster.extender]
    node = cluster.nodes[0]
    commands = {
        "why": ["why", stuck, *from_cluster],
        "why-json-cluster": ["why", stuck, *from_cluster, "-o", "json"],
        "why-json-extender": ["why", stuck, *from_extender, "-o", "json"],
        "devices-cluster": ["devices", "--node", node, *from_cluster, "-o", "json"],
        "devices-extender": ["devices", "--node", node, *from_extender, "-o", "json"],
    }
    return dict(zip(commands, run_plugin(*commands.values()), strict=True))


# --- what the API server holds ---------------------------------------------------------------------


def without_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` without ``metadata.managedFields``, which the extender drops on ingest."""
    return {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if k != "managedFields"}}


def expected_reasons(cluster: Cluster) -> tuple[int, dict[str, int]]:
    """(nodes, {reason: count}) kube-scheduler counts for the stuck pod, from the API server's
    nodes: the two nodes with GPUs cannot fit four, every other node has no device of the class."""
    total = len(cluster.scenario.admin.items("/api/v1/nodes"))
    return total, {CANNOT_ALLOCATE: 2, **({NO_DEVICES: total - 2} if total > 2 else {})}


def reasons_in(message: str) -> tuple[int, dict[str, int]]:
    """(nodes, {reason: count}) of ``0/N nodes are available: C REASON, C REASON. ...``."""
    found = re.match(r"0/(\d+) nodes are available: (.*?)\.(?: |$)", message)
    assert found, message
    counted = (re.fullmatch(r"(\d+) (.+)", part) for part in found[2].split(", "))
    return int(found[1]), {m[2]: int(m[1]) for m in counted if m}


def holders(s: Scenario) -> dict[tuple[str, str], tuple[list[str], list[str]]]:
    """(pool, device) -> (claims holding it, their pods), from the API server's claims."""
    held: dict[tuple[str, str], tuple[list[str], list[str]]] = {}
    for claim in s.claims():
        status = claim.get("status") or {}
        key = f"{s.namespace}/{claim['metadata']['name']}"
        pods = [f"{s.namespace}/{r['name']}" for r in status.get("reservedFor") or []]
        for result in ((status.get("allocation") or {}).get("devices") or {}).get("results") or []:
            claims, their_pods = held.setdefault((result["pool"], result["device"]), ([], []))
            claims.append(key)
            their_pods += pods
    return held


def slice_devices(s: Scenario, node: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(slice, device) on ``node``, from the API server's ResourceSlices of the scenario's driver."""
    slices = [
        x
        for x in s.admin.items(f"/apis/{V1}/resourceslices")
        if x["spec"]["driver"] == s.driver and x["spec"].get("nodeName") == node
    ]
    return [(x, device) for x in sorted(slices, key=lambda x: x["metadata"]["name"]) for device in x["spec"]["devices"]]


def attributes(device: dict[str, Any]) -> dict[str, Any]:
    return {name: next(iter(value.values())) for name, value in (device.get("attributes") or {}).items()}


def capacity(device: dict[str, Any]) -> dict[str, str]:
    return {name: value["value"] for name, value in (device.get("capacity") or {}).items()}


def caught_up(actual: Callable[[], Any], expected: Callable[[], Any], what: str) -> None:
    """``actual()`` comes to equal ``expected()`` (the extender's cache follows the API server's
    watch); a failure shows both."""
    with contextlib.suppress(AssertionError):
        eventually(lambda: actual() == expected(), timeout=60, what=what)
        return
    assert actual() == expected(), what


# --- kubectl dra -----------------------------------------------------------------------------------


def test_why_gives_the_extenders_reasons_from_the_cluster_and_from_the_extender(
    cluster: Cluster, plugin: dict[str, Run]
) -> None:
    expected = expected_reasons(cluster)
    stuck = f"{cluster.namespace}/stuck"
    text = plugin["why"]
    assert (text.code, text.err) == (0, ""), text.err
    lines = text.out.splitlines()
    assert lines[0].startswith(f"Pod {stuck}: "), lines[0]
    assert reasons_in(lines[0].removeprefix(f"Pod {stuck}: ")) == expected, lines[0]
    assert lines[1] == f"Claims: {cluster.namespace}/four"
    closest = lines[lines.index("Closest nodes:") + 1 :][:2]
    first, second = cluster.nodes
    assert sorted(line.split(":")[0].strip() for line in closest) == [first, second], closest
    # the same document from the cluster (explained by the plugin) and from the extender
    local, remote = plugin["why-json-cluster"].json(), plugin["why-json-extender"].json()
    assert local == remote
    assert (remote["pod"], remote["bound"], remote["error"]) == (stuck, None, "")
    assert reasons_in(remote["summary"]) == expected, remote["summary"]
    assert " preemption: 0/" in remote["summary"], remote["summary"]  # nobody of lower priority to evict
    assert remote["fits"] == {"count": 0, "nodes": []}
    assert remote["claims"] == [f"{cluster.namespace}/four"]
    failed = [r for r in remote["reasons"] if r["outcome"] == "Failed"]
    assert failed == [{"reason": CANNOT_ALLOCATE, "outcome": "Failed", "count": 2, "nodes": sorted(cluster.nodes)}]
    # and what kube-scheduler told the pod, from the extender's answers, says the same
    event = cluster.scenario.event("stuck", "FailedScheduling")
    assert reasons_in(event["message"]) == expected, event["message"]


def test_devices_shows_the_api_servers_allocations_from_the_cluster_and_from_the_extender(
    cluster: Cluster, plugin: dict[str, Run]
) -> None:
    node = cluster.nodes[0]
    held = holders(cluster.scenario)
    expected = [
        {
            "node": node,
            "driver": cluster.scenario.driver,
            "pool": node,
            "device": device["name"],
            "state": "allocated" if (node, device["name"]) in held else "free",
            "claims": held.get((node, device["name"]), ([], []))[0],
            "pods": held.get((node, device["name"]), ([], []))[1],
            "attributes": attributes(device),
            "capacity": capacity(device),
        }
        for _, device in slice_devices(cluster.scenario, node)
    ]
    assert len(expected) == 2
    for source in ("devices-cluster", "devices-extender"):
        listed = plugin[source].json()
        assert listed["kind"] == "DeviceList"
        assert listed["items"] == expected, source


# --- /debug --------------------------------------------------------------------------------------------


def test_debug_claims_and_pods_are_the_api_servers_objects(cluster: Cluster, replica: Pair) -> None:
    s, extender = cluster.scenario, replica.extender
    claims = [c["metadata"]["name"] for c in s.claims()]
    assert len(claims) == 3  # one, four and the template's
    for name in claims:
        caught_up(
            lambda name=name: extender.get(f"/debug/resourceclaims/{s.namespace}/{name}"),
            lambda name=name: without_managed_fields(s.get_claim(name)),
            f"debug/resourceclaims/{s.namespace}/{name}",
        )
    for name in ("runner", "templated", "stuck"):
        caught_up(
            lambda name=name: extender.get(f"/debug/pods/{s.namespace}/{name}"),
            lambda name=name: without_managed_fields(s.get_pod(name)),
            f"debug/pods/{s.namespace}/{name}",
        )
    templated = extender.get(f"/debug/pods/{s.namespace}/templated")
    (status,) = templated["status"]["resourceClaimStatuses"]
    assert status["resourceClaimName"] in claims
    assert templated["spec"]["nodeName"] in cluster.nodes
    assert extender.status(f"/debug/resourceclaims/{s.namespace}/nobody") == 404
    assert extender.status(f"/debug/pods/{s.namespace}/nobody") == 404


def test_debug_nodes_show_the_slices_devices_and_the_claims_holding_them(cluster: Cluster, replica: Pair) -> None:
    s, extender = cluster.scenario, replica.extender
    for node in cluster.nodes:

        def expected(node: str = node) -> dict[str, Any]:
            held = holders(s)
            return {
                "node": node,
                "labels": s.admin.get(f"/api/v1/nodes/{node}")["metadata"]["labels"],
                "pools": [{"driver": s.driver, "pool": node, "generation": 1, "status": "ok"}],
                "devices": [
                    {
                        "driver": s.driver,
                        "pool": node,
                        "device": device["name"],
                        "slice": slice_["metadata"]["name"],
                        "attributes": attributes(device),
                        "capacity": capacity(device),
                        "claims": held.get((node, device["name"]), ([], []))[0],
                    }
                    for slice_, device in slice_devices(s, node)
                ],
            }

        caught_up(lambda node=node: extender.get(f"/debug/nodes/{node}"), expected, f"debug/nodes/{node}")
    # every device the pods were bound with is held, by the claim the API server says
    allocated = [d for node in cluster.nodes for d in extender.get(f"/debug/nodes/{node}")["devices"] if d["claims"]]
    assert len(allocated) == 2


def test_debug_objects_lists_the_api_servers_objects(cluster: Cluster, replica: Pair) -> None:
    s, extender = cluster.scenario, replica.extender
    ns = s.namespace
    paths = {
        "DeviceClass": f"/apis/{V1}/deviceclasses",
        "ResourceSlice": f"/apis/{V1}/resourceslices",
        "ResourceClaimTemplate": f"/apis/{V1}/namespaces/{ns}/resourceclaimtemplates",
        "ResourceClaim": f"/apis/{V1}/namespaces/{ns}/resourceclaims",
        "Pod": f"/api/v1/namespaces/{ns}/pods",
    }
    ours = re.compile(rf"^{re.escape(s.prefix)}-")

    def mine(obj: dict[str, Any]) -> bool:
        meta = obj["metadata"]
        return meta.get("namespace") == ns or bool(ours.match(meta["name"])) or meta["name"].endswith(f"-{s.prefix}")

    def held() -> dict[tuple[str, str], Any]:
        listed = extender.get("/debug/objects")
        assert listed["kind"] == "List" and not (listed.get("metadata") or {}).get("incomplete"), listed["metadata"]
        # managedFields: the extender drops them from what it caches (claims, pods), not from the
        # classes and slices it lists for this answer
        return {(o["kind"], o["metadata"]["name"]): without_managed_fields(o) for o in listed["items"] if mine(o)}

    def served() -> dict[tuple[str, str], Any]:
        out: dict[tuple[str, str], Any] = {}
        for kind, path in paths.items():
            for obj in s.admin.items(path):
                if mine(obj):
                    out[(kind, obj["metadata"]["name"])] = {
                        "apiVersion": "v1" if kind == "Pod" else V1,
                        "kind": kind,
                        **without_managed_fields(obj),
                    }
        for node in cluster.nodes:
            labels = s.admin.get(f"/api/v1/nodes/{node}")["metadata"]["labels"]
            out[("Node", node)] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": labels}}
        return out

    caught_up(held, served, "debug/objects")
    kinds = sorted(kind for kind, _ in held())
    assert kinds == sorted(["DeviceClass", "Node", "Node", "Pod", "Pod", "Pod", "ResourceClaim", "ResourceClaim",
                            "ResourceClaim", "ResourceClaimTemplate", "ResourceSlice", "ResourceSlice"])  # fmt: skip
