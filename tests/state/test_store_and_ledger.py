"""ObjectStore ingest and incremental snapshots; InFlightLedger bookkeeping.

The service's use of both is covered in test_service.py; decoding itself in tests/core/test_convert*.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from extender.core.errors import InvalidObject
from extender.core.model import AllocationResult, DeviceResult, Features, NodeInfo
from extender.state.cache.ledger import InFlightLedger
from extender.state.cache.store import ObjectStore
from tests import builders as b

V1 = "resource.k8s.io/v1"
FEATURES = Features()


def raw_slice(name: str, node: str, devices: list[str], *, pool: str | None = None, count: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": V1,
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": "driver-a",
            "nodeName": node,
            "pool": {"name": pool or node, "generation": 1, "resourceSliceCount": count},
            "devices": [{"name": d} for d in devices],
        },
    }


def raw_claim(name: str, allocated: list[str] | None = None) -> dict[str, Any]:
    claim: dict[str, Any] = {
        "apiVersion": V1,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"devices": {"requests": [{"name": "req-0", "exactly": {"deviceClassName": "class-a"}}]}},
    }
    if allocated:
        claim["status"] = {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "req-0", "driver": "driver-a", "pool": p, "device": d}
                        for p, d in (x.split("/") for x in allocated)
                    ]
                }
            }
        }
    return claim


def test_upsert_decodes_and_indexes() -> None:
    store = ObjectStore()
    store.upsert(raw_slice("s1", "node-1", ["d1", "d2"]))
    store.upsert(raw_claim("c1", ["node-1/d1"]))
    store.upsert({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1", "labels": {"zone": "a"}}})
    assert store.device_count() == 2
    assert store.node("node-1") == NodeInfo("node-1", {"zone": "a"})
    assert store.node("unknown").labels == {}
    assert {str(d) for d in store.allocated_state().devices} == {"driver-a/node-1/d1"}
    store.delete("ResourceClaim", "default", "c1")
    assert store.allocated_state().devices == set()


def test_malformed_claim_is_rejected_and_changes_nothing() -> None:
    store = ObjectStore()
    bad = raw_claim("c1")
    bad["spec"]["devices"]["requests"][0]["exactly"]["count"] = -1
    before = store.revision
    with pytest.raises(InvalidObject, match="count"):
        store.upsert(bad)
    assert store.claims == {} and store.revision == before


def test_a_status_update_reuses_the_decoded_spec_and_a_changed_spec_is_decoded_again() -> None:
    store = ObjectStore()
    store.upsert(raw_claim("c1"))
    first = store.claims["default/c1"]
    store.upsert(raw_claim("c1", ["node-1/d1"]))  # a bind: same spec, new status
    allocated = store.claims["default/c1"]
    assert allocated.requests is first.requests and allocated.allocation is not None
    changed = raw_claim("c1", ["node-1/d1"])
    changed["spec"]["devices"]["requests"][0]["exactly"]["count"] = 2
    store.upsert(changed)
    assert store.claims["default/c1"].requests[0].exactly.count == 2  # type: ignore[union-attr]
    bad = raw_claim("c1")
    bad["spec"]["devices"]["requests"][0]["exactly"]["count"] = -1  # invalid, not reused from before
    with pytest.raises(InvalidObject, match="count"):
        store.upsert(bad)
    versionless = raw_claim("c1", ["node-1/d1"])
    del versionless["apiVersion"]  # the same spec bytes but no group: still refused as before
    with pytest.raises(InvalidObject, match="apiVersion"):
        store.upsert(versionless)
    unshareable = raw_claim("c2")
    unshareable["spec"]["devices"]["config"] = [{"opaque": {"driver": "d", "parameters": {1: "x"}}}]
    store.upsert(unshareable)  # a non-string key (YAML): decoded, just not part of any shape
    assert "default/c2" in store.claims and "default/c2" not in store.claim_specs


def raw_template(name: str) -> dict[str, Any]:
    spec = raw_claim("unused")["spec"]
    return {
        "apiVersion": V1,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"spec": spec},
    }


def test_a_claim_made_from_a_template_reuses_the_templates_decoded_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    """The resourceclaim controller copies the template's spec into each claim it makes: the store
    decodes that spec once, for the template, and each claim of the same spec key reuses it."""
    import extender.state.cache.store as store_module

    store = ObjectStore()
    store.upsert(raw_template("t"))
    template = store.templates["default/t"]
    store.upsert(raw_claim("p1-t-abcde"))
    store.upsert(raw_claim("p2-t-fghij"))
    first, second = store.claims["default/p1-t-abcde"], store.claims["default/p2-t-fghij"]
    assert first.requests is template.spec.requests and second.requests is template.spec.requests
    fresh = ObjectStore()
    fresh.upsert(raw_claim("p1-t-abcde"))
    assert first == fresh.claims["default/p1-t-abcde"]  # what decoding it afresh gives
    other = raw_claim("other")
    other["spec"]["devices"]["requests"][0]["exactly"]["count"] = 2
    store.upsert(other)
    assert store.claims["default/other"].requests[0].exactly.count == 2  # type: ignore[union-attr]
    # bounded: the oldest spec goes first
    monkeypatch.setattr(store_module, "DECODED_SPECS", 2)
    third = raw_claim("third")
    third["spec"]["devices"]["requests"][0]["exactly"]["count"] = 3
    store.upsert(third)
    store.upsert(raw_claim("p3-t-klmno"))
    assert store.claims["default/p3-t-klmno"].requests is not template.spec.requests
    assert store.claims["default/p3-t-klmno"] == dataclasses.replace(
        first, name="p3-t-klmno", uid="uid-p3-t-klmno", requests=store.claims["default/p3-t-klmno"].requests
    )


def test_snapshot_keeps_unaffected_node_views_warm() -> None:
    store = ObjectStore()
    for i in range(1, 4):
        store.upsert(raw_slice(f"s{i}", f"node-{i}", ["d1"]))
    first = store.snapshot()
    views = {i: first.node_view(NodeInfo(f"node-{i}"), FEATURES) for i in range(1, 4)}
    store.upsert(raw_slice("s2", "node-2", ["d1", "d2"]))  # node-2 changed
    second = store.snapshot()
    assert second is not first
    assert second.node_view(NodeInfo("node-1"), FEATURES) is views[1]
    assert second.node_view(NodeInfo("node-3"), FEATURES) is views[3]
    changed = second.node_view(NodeInfo("node-2"), FEATURES)
    assert changed is not views[2] and [e.id.device for e in changed.devices] == ["d1", "d2"]


def test_snapshot_invalidates_every_node_of_a_multi_node_pool() -> None:
    store = ObjectStore()
    store.upsert(raw_slice("a", "node-1", ["d1"], pool="shared", count=2))
    store.upsert(raw_slice("b", "node-2", ["d2"], pool="shared", count=2))
    first = store.snapshot()
    view1 = first.node_view(NodeInfo("node-1"), FEATURES)
    assert [e.id.device for e in view1.devices] == ["d1"]
    store.delete("ResourceSlice", None, "b")  # the pool is now incomplete for node-1 too
    view1_after = store.snapshot().node_view(NodeInfo("node-1"), FEATURES)
    assert view1_after is not view1
    assert view1_after.devices == () and view1_after.pools[0].incomplete


def test_replacing_a_slice_forgets_its_selector_results() -> None:
    store = ObjectStore()
    store.upsert(raw_slice("s1", "node-1", ["d1"]))
    old = store.slices["s1"]
    store.selectors.results('device.driver == "driver-a"', old)
    store.upsert(raw_slice("s1", "node-1", ["d1", "d2"]))
    assert store.selectors.table('device.driver == "driver-a"').get(old) is None


def test_replace_drops_objects_missing_from_a_relist() -> None:
    store = ObjectStore()
    store.upsert(raw_slice("s1", "node-1", ["d1"]))
    store.upsert(raw_slice("s2", "node-2", ["d1"]))
    store.replace("ResourceSlice", [raw_slice("s2", "node-2", ["d1"])])
    assert set(store.slices) == {"s2"}


def _member(name: str, group: str | None, namespace: str = "default") -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": "dra"}
    if group is not None:
        spec["schedulingGroup"] = {"podGroupName": group}
    return {"kind": "Pod", "metadata": {"name": name, "namespace": namespace, "uid": name}, "spec": spec}


def test_pods_are_indexed_by_the_pod_group_they_name_whether_it_exists_or_not() -> None:
    store = ObjectStore()
    store.upsert(_member("a", "pg"))
    store.upsert(_member("b", "pg"))
    store.upsert(_member("c", "pg", namespace="other"))
    store.upsert(_member("d", None))
    assert store.group_pods == {"default/pg": {"default/a": None, "default/b": None}, "other/pg": {"other/c": None}}
    store.upsert(
        {
            "apiVersion": "scheduling.k8s.io/v1alpha2",
            "kind": "PodGroup",
            "metadata": {"name": "pg", "namespace": "default", "uid": "g"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
        }
    )
    assert store.pod_groups["default/pg"].min_count == 2
    store.upsert(_member("a", "other-group"))  # a pod of the same name made again for another group
    store.delete("Pod", "default", "b")
    store.delete("Pod", "other", "c")
    assert store.group_pods == {"default/other-group": {"default/a": None}}
    store.replace("Pod", [_member("e", "pg")])
    store.replace("PodGroup", [])
    assert store.group_pods == {"default/pg": {"default/e": None}} and store.pod_groups == {}


def test_a_malformed_pod_group_is_refused_and_changes_nothing() -> None:
    store = ObjectStore()
    raw = {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup", "metadata": {"name": "pg"}}
    store.upsert({**raw, "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}})
    revision = store.revision
    with pytest.raises(InvalidObject, match="minCount"):
        store.upsert({**raw, "spec": {"schedulingPolicy": {"gang": {"minCount": -1}}}})
    assert store.pod_groups["default/pg"].min_count == 2 and store.revision == revision


def _result(device: str) -> AllocationResult:
    return AllocationResult(devices=(DeviceResult(request="req-0", driver="driver-a", pool="node-1", device=device),))


def test_ledger_overlay_reconcile_and_ttl() -> None:
    now = [100.0]
    ledger = InFlightLedger(ttl_seconds=10, clock=lambda: now[0])
    claim = b.claim("c1")
    ledger.add(claim=claim, pod_key="default/p", pod_uid="u", node="node-1", result=_result("d1"))
    assert len(ledger) == 1
    overlay = ledger.overlay(ObjectStore().allocated_state())
    assert {str(d) for d in overlay.devices} == {"driver-a/node-1/d1"}
    # not allocated in the store yet: kept
    assert ledger.reconcile({claim.key: claim}) == [] and len(ledger) == 1
    now[0] += 10
    assert [e.claim_key for e in ledger.expire()] == [claim.key]
    assert len(ledger) == 0


def test_ledger_drops_entries_the_store_caught_up_with() -> None:
    ledger = InFlightLedger()
    claim = b.claim("c1")
    ledger.add(claim=claim, pod_key="default/p", pod_uid="u", node="node-1", result=_result("d1"))
    allocated = dataclasses.replace(claim, allocation=_result("d1"))
    assert [e.claim_key for e in ledger.reconcile({claim.key: allocated})] == [claim.key]
    ledger.add(claim=claim, pod_key="default/p", pod_uid="u", node="node-1", result=_result("d1"))
    recreated = dataclasses.replace(claim, uid="other")
    assert len(ledger.reconcile({claim.key: recreated})) == 1


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["hold", "bind", "drop", "drop_holds", "expire", "reconcile", "tick"]),
            st.integers(0, 3),  # claim
            st.integers(0, 2),  # pod
            st.integers(1, 5),  # ttl or tick
        ),
        max_size=40,
    )
)
def test_the_ledgers_indexes_answer_like_a_scan_of_every_entry(ops: list[tuple[str, int, int, int]]) -> None:
    """``holds_of`` (a per-pod index) and ``expire`` (skipped before the earliest expiry) give
    what scanning every entry gives, whatever adds, replaces and drops came before."""
    now = [0.0]
    ledger = InFlightLedger(ttl_seconds=4, clock=lambda: now[0])
    claims = [b.claim(f"c{i}") for i in range(4)]
    for op, c, pod, n in ops:
        claim, uid = claims[c], f"u{pod}"
        if op in ("hold", "bind"):
            ledger.add(
                claim=claim,
                pod_key=f"default/p{pod}",
                pod_uid=uid,
                node="node-1",
                result=_result("d1"),
                tentative=op == "hold",
                ttl_seconds=n,
            )
        elif op == "drop":
            ledger.drop(claim.key)
        elif op == "drop_holds":
            expected = {e.claim_key for e in ledger if e.tentative and e.pod_uid == uid}
            assert {e.claim_key for e in ledger.drop_holds(uid)} == expected
            assert not ledger.holds_of(uid)
        elif op == "expire":
            keep = {"u0"} if n % 2 else set()
            expected = [e for e in ledger if e.expires_at <= now[0] and (e.tentative or e.pod_uid not in keep)]
            assert ledger.expire(keep=keep) == expected
        elif op == "reconcile":
            ledger.reconcile({claim.key: dataclasses.replace(claim, allocation=_result("d1"))})
        else:
            now[0] += n
        for p in range(3):
            held = sorted(ledger.holds_of(f"u{p}"), key=lambda e: e.claim_key)
            assert held == [
                e for e in sorted(ledger, key=lambda e: e.claim_key) if e.tentative and e.pod_uid == f"u{p}"
            ]
    now[0] += 100  # past every TTL: nothing is left behind by a stale earliest expiry
    ledger.expire()
    assert len(ledger) == 0


def test_a_reconcile_told_which_claims_changed_looks_at_those_and_at_entries_added_since() -> None:
    ledger = InFlightLedger()
    c1, c2 = b.claim("c1"), b.claim("c2")
    ledger.add(claim=c1, pod_key="default/p", pod_uid="u", node="node-1", result=_result("d1"))
    ledger.reconcile({c1.key: c1, c2.key: c2}, changed=())  # c1's entry is looked at: not allocated yet
    ledger.add(claim=c2, pod_key="default/q", pod_uid="v", node="node-1", result=_result("d2"))
    allocated = {c1.key: dataclasses.replace(c1, allocation=_result("d1")), c2.key: dataclasses.replace(c2, uid="x")}
    # c2's entry was added since the last call: looked at though no change was named; c1's is not
    assert [e.claim_key for e in ledger.reconcile(allocated, changed=())] == [c2.key]
    assert ledger.get(c1.key) is not None
    assert [e.claim_key for e in ledger.reconcile(allocated, changed={c1.key})] == [c1.key]


def test_the_in_use_state_without_some_claims_is_recounted_from_the_other_holders() -> None:
    """Preemption's what-if (``AllocationIndex.without``): exclusive devices, shares and consumed
    capacity come back exactly as if the removed claims held nothing; admin access never counted;
    the index itself is untouched."""
    from extender.core.model import AllocationResult, DeviceID, DeviceResult, SharedDeviceID
    from extender.core.quantity import Quantity
    from extender.state.cache.store import AllocationIndex

    def share(device: str, share_id: str, memory: str) -> DeviceResult:
        return DeviceResult(
            request="r",
            driver="d",
            pool="p",
            device=device,
            share_id=share_id,
            consumed_capacity={"memory": Quantity.parse(memory)},
        )

    whole = DeviceResult(request="r", driver="d", pool="p", device="gpu-0")
    admin = DeviceResult(request="r", driver="d", pool="p", device="gpu-1", admin_access=True)
    index = AllocationIndex()
    index.set("a", AllocationResult(devices=(whole, share("gpu-2", "s1", "10Gi"))))
    index.set("b", AllocationResult(devices=(share("gpu-2", "s2", "20Gi"), admin)))
    index.set("c", AllocationResult(devices=(whole,)))  # a second holder of gpu-0 (an in-flight copy)
    gpu0, gpu2 = DeviceID("d", "p", "gpu-0"), DeviceID("d", "p", "gpu-2")
    without_a = index.without({"a"})
    assert gpu0 in without_a.devices  # c still holds it
    assert without_a.shared_ids == {SharedDeviceID(gpu2, "s2")}
    assert without_a.consumed_capacity == {gpu2: {"memory": Quantity.parse("20Gi")}}
    without_all = index.without({"a", "b", "c"})
    assert not without_all.devices and not without_all.shared_ids and not without_all.consumed_capacity
    assert index.state.consumed_capacity[gpu2] == {"memory": Quantity.parse("30Gi")}  # untouched
    assert DeviceID("d", "p", "gpu-1") not in index.state.devices
