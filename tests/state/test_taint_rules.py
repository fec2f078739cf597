"""DeviceTaintRules (KEP-5055) in the store and the service, on the embedded backend: a rule's taint
lands on the devices its selector matches, as kube-scheduler's slice tracker puts it there, so the
allocator leaves those devices to requests that tolerate it; changing or deleting the rule frees
them again; explain names the taint."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from extender.backends.embedded import EmbeddedBackend
from extender.core.errors import InvalidObject
from extender.core.model import DeviceTaint
from extender.state.cache.store import ObjectStore
from extender.state.service import SchedulingService
from extender.views.debug import DebugViews
from tests.manifests import claim, cluster, pod

NODES = ["node-1", "node-2"]


def rule(name: str, effect: str = "NoSchedule", **selector: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1beta2",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": {
            **({"deviceSelector": selector} if selector else {}),
            "taint": {"key": "example.com/unhealthy", "value": "ecc", "effect": effect},
        },
    }


def taints(store: ObjectStore, slice_name: str) -> dict[str, tuple[DeviceTaint, ...]]:
    return {d.name: d.taints for d in store.slices[slice_name].devices}


def test_a_rule_taints_the_devices_it_selects_and_only_those() -> None:
    store = ObjectStore()
    for obj in cluster(nodes=2, gpus=2):
        store.upsert(copy.deepcopy(obj))
    store.upsert(rule("one-gpu", driver="gpu.example.com", pool="node-1", device="gpu-1"))
    unhealthy = DeviceTaint(key="example.com/unhealthy", value="ecc", effect="NoSchedule")
    assert taints(store, "node-1-gpus") == {"gpu-0": (), "gpu-1": (unhealthy,)}
    assert taints(store, "node-2-gpus") == {"gpu-0": (), "gpu-1": ()}
    assert store.unpatched_slices["node-1-gpus"].devices[1].taints == ()
    # a slice published afterwards gets it too; a rule without a selector matches every device
    store.upsert(rule("all", effect="NoExecute"))
    everywhere = DeviceTaint(key="example.com/unhealthy", value="ecc", effect="NoExecute")
    assert taints(store, "node-2-gpus") == {"gpu-0": (everywhere,), "gpu-1": (everywhere,)}
    assert taints(store, "node-1-gpus")["gpu-1"] == (everywhere, unhealthy)  # rules in name order
    store.delete("DeviceTaintRule", None, "all")
    store.delete("DeviceTaintRule", None, "one-gpu")
    assert taints(store, "node-1-gpus") == {"gpu-0": (), "gpu-1": ()}


def test_a_malformed_rule_is_rejected_and_changes_nothing() -> None:
    store = ObjectStore()
    bad = rule("bad")
    bad["spec"]["taint"]["effect"] = "Sometimes"
    with pytest.raises(InvalidObject, match=r"spec\.taint\.effect"):
        store.upsert(bad)
    assert store.taint_rules == {}


def test_tainted_devices_are_left_to_requests_that_tolerate_the_taint() -> None:
    objects = cluster(claim("c"), pod("p", "c"), nodes=2, gpus=1)
    backend = EmbeddedBackend(copy.deepcopy(objects))
    svc = SchedulingService(backend=backend, hold_seconds=0)  # no holds: each filter stands alone
    assert svc.filter(pod("p", "c"), NODES).node_names == NODES
    backend.apply(rule("node-1-bad", pool="node-1"))
    outcome = svc.filter(pod("p", "c"), NODES)
    assert outcome.node_names == ["node-2"] and set(outcome.failed) == {"node-1"}
    explanation = str(DebugViews(svc).explain(pod("p", "c"), ["node-1"]))
    assert "untolerated taints: 1 (example.com/unhealthy=ecc:NoSchedule)" in explanation
    tolerating = claim("t")
    tolerating["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = [
        {"key": "example.com/unhealthy", "operator": "Exists"}
    ]
    backend.apply(tolerating)
    backend.apply(pod("q", "t"))
    assert svc.filter(pod("q", "t"), NODES).node_names == NODES
    backend.delete("DeviceTaintRule", None, "node-1-bad")
    assert svc.filter(pod("p", "c"), NODES).node_names == NODES
