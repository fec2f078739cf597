"""Gang members through the service (embedded backend): one joint plan per pass, each member pinned
to its planned node, the plan's devices held for the whole gang until the binds, infeasible gangs
answered with why and nothing held (spec/workloads-and-gangs.md §7.2-§7.4)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from extender.backends.embedded import EmbeddedBackend
from extender.core.errors import ExtenderError, Transient
from extender.core.model import AllocationResult, DeviceResult
from extender.state.service import SchedulingService
from extender.views.debug import DebugViews
from tests.manifests import claim, cluster, gpu_slice, node, pod, template

NODES = ["node-1", "node-2", "node-3"]


def pod_group(name: str, min_count: int | None) -> dict[str, Any]:
    policy = {"gang": {"minCount": min_count}} if min_count is not None else {"basic": {}}
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"schedulingPolicy": policy},
    }


def member(name: str, group: str, *claims: str) -> dict[str, Any]:
    raw = pod(name, *claims)
    raw["spec"]["schedulingGroup"] = {"podGroupName": group}
    return raw


def gpu_claim(name: str, count: int, model: str | None = None) -> dict[str, Any]:
    raw = claim(name, count)
    if model is not None:
        raw["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
            {"cel": {"expression": f'device.attributes["gpu.example.com"].model == "{model}"'}}
        ]
    return raw


def models_slice(node_name: str, *models: str) -> dict[str, Any]:
    raw = gpu_slice(node_name, len(models))
    raw["spec"]["devices"] = [
        {"name": f"{model}-{i}", "attributes": {"model": {"string": model}}} for i, model in enumerate(models)
    ]
    return raw


def service(objects: list[dict[str, Any]], **options: Any) -> SchedulingService:
    return SchedulingService(backend=EmbeddedBackend(copy.deepcopy(objects)), **options)


def test_every_member_is_pinned_to_its_planned_node_and_the_gang_binds_whole() -> None:
    objects = cluster(
        pod_group("pg", 3),
        *(gpu_claim(f"c{i}", 2) for i in range(3)),
        *(member(f"m{i}", "pg", f"c{i}") for i in range(3)),
        nodes=3,
        gpus=2,
    )
    svc = service(objects)
    answers = {f"m{i}": svc.filter(member(f"m{i}", "pg", f"c{i}"), NODES) for i in (2, 0, 1)}
    nodes = {name: outcome.node_names for name, outcome in answers.items()}
    assert all(len(n) == 1 for n in nodes.values()) and len({n[0] for n in nodes.values()}) == 3
    failed = answers["m0"].failed
    assert set(failed) == set(NODES) - set(nodes["m0"])
    assert all(reason == f"gang default/pg: member planned on {nodes['m0'][0]}" for reason in failed.values())
    # the whole gang's devices are held: an ordinary pod finds no GPU anywhere
    svc.store.upsert(pod("other", "extra"))
    svc.backend.store.upsert(copy.deepcopy(gpu_claim("extra", 1)))  # type: ignore[attr-defined]
    assert svc.filter(pod("other", "extra"), NODES).node_names == []
    assert svc.stats.gang_plans == {"found": 1}


async def test_the_binds_allocate_the_planned_devices_and_nothing_twice() -> None:
    svc = service(gang_of(2, nodes=2))
    chosen = {name: svc.filter(member(name, "pg", f"c{name[1]}"), NODES[:2]).node_names[0] for name in ("m0", "m1")}
    # kube-scheduler sends a pass's binds together (spec E5a)
    await asyncio.gather(*(svc.bind("default", name, f"uid-{name}", node) for name, node in chosen.items()))
    assert svc.stats.gang_barrier == {"opened": 1}
    views = DebugViews(svc)
    devices = []
    for name in chosen:
        raw = views.claim("default", f"c{name[1]}")
        assert raw is not None
        results = raw["status"]["allocation"]["devices"]["results"]
        assert {r["pool"] for r in results} == {chosen[name]}
        devices += [(r["pool"], r["device"]) for r in results]
    assert len(devices) == len(set(devices)) == 4
    assert len(svc.ledger) == 0  # holds settled by the binds


def test_kubernetes_138765_a_joint_choice_places_what_member_by_member_cannot() -> None:
    """Node 1 has the only h100, node 2 an a100; *a* takes any GPU, *b* only an h100. One member at
    a time (in-tree), *a* may take node 1's h100 and *b* never fits."""
    objects = [
        *cluster(nodes=0),
        node("node-1"),
        node("node-2"),
        models_slice("node-1", "h100"),
        models_slice("node-2", "a100"),
        pod_group("pg", 2),
        gpu_claim("any", 1),
        gpu_claim("h100-only", 1, model="h100"),
        member("a", "pg", "any"),
        member("b", "pg", "h100-only"),
    ]
    svc = service(objects)
    # without the gang (the ordinary filter) node 1 is a's best node as much as node 2
    assert svc._decide_and_apply(member("a", "pg", "any"), NODES[:2]).outcome.node_names == NODES[:2]
    a = svc.filter(member("a", "pg", "any"), NODES[:2])
    b = svc.filter(member("b", "pg", "h100-only"), NODES[:2])
    assert (a.node_names, b.node_names) == (["node-2"], ["node-1"])


def test_an_infeasible_gang_is_told_why_holds_nothing_and_its_retries_are_remembered() -> None:
    objects = cluster(
        pod_group("pg", 3),
        *(gpu_claim(f"c{i}", 2) for i in range(3)),
        *(member(f"m{i}", "pg", f"c{i}") for i in range(3)),
        nodes=2,
        gpus=2,
    )
    svc = service(objects, gang_retry_backoff=0)
    outcome = svc.filter(member("m0", "pg", "c0"), NODES[:2])
    reason = "gang default/pg: 2 of 3 waiting members fit together (minCount 3)"
    assert outcome.node_names == [] and outcome.failed == dict.fromkeys(NODES[:2], reason)
    assert len(svc.ledger) == 0
    # kube-scheduler retries the pass back to back, each pass's node list starting elsewhere: the
    # same answer, without planning again
    for n in range(3):
        for i in range(3):
            offered = NODES[:2] if n % 2 == 0 else NODES[1::-1]
            assert svc.filter(member(f"m{i}", "pg", f"c{i}"), offered).failed == outcome.failed
    assert svc.stats.gang_plans == {"infeasible": 1, "remembered": 3}


def test_a_search_cut_short_is_remembered_for_the_same_node_order_only() -> None:
    """A search its budget cut short tried the nodes in the order offered; another order may fit.
    Its answer is reused for the same list only, where a proven infeasible one holds for the set."""
    objects = cluster(
        pod_group("pg", 3),
        gpu_claim("c0", 2),
        gpu_claim("c1", 2),
        gpu_claim("c2", 1),
        *(member(f"m{i}", "pg", f"c{i}") for i in range(3)),
        nodes=2,
        gpus=2,
    )
    svc = service(objects, gang_retry_backoff=0)
    svc.gang_filter.max_checks = 1  # members of different shapes: a search, cut short at once
    for offered in (NODES[:2], NODES[:2], NODES[1::-1]):
        for i in range(3):
            assert not svc.filter(member(f"m{i}", "pg", f"c{i}"), offered).node_names
    assert svc.stats.gang_plans == {"budget": 2, "remembered": 1}


def test_unchanged_infeasible_passes_are_answered_error_so_that_kube_scheduler_backs_off() -> None:
    objects = cluster(
        pod_group("pg", 3),
        *(gpu_claim(f"c{i}", 2) for i in range(3)),
        *(member(f"m{i}", "pg", f"c{i}") for i in range(3)),
        nodes=2,
        gpus=2,
    )
    svc = service(objects, gang_retry_backoff=2)
    answers = []
    for _ in range(3):  # the first pass plans, the next two are unchanged
        answers.append([svc.filter(member(f"m{i}", "pg", f"c{i}"), NODES[:2]) for i in range(3)])
    assert all(a.failed and not a.error for a in answers[0] + answers[1])
    assert all(not a.failed for a in answers[2])
    assert answers[2][0].error.startswith("gang default/pg: 2 of 3 waiting members fit together (minCount 3)")
    assert "unchanged for 2 passes" in answers[2][0].error
    # a change the answer depends on (another node with room) ends it: planned again, and placed
    svc.backend.store.upsert(node("node-3"))  # type: ignore[attr-defined]
    svc.backend.store.upsert(gpu_slice("node-3", 2))  # type: ignore[attr-defined]
    assert len(svc.filter(member("m0", "pg", "c0"), NODES).node_names) == 1


def test_kube_schedulers_pod_group_status_writes_after_each_pass_do_not_end_the_backoff() -> None:
    """After every failed pass kube-scheduler patches the PodGroup's PodGroupScheduled condition
    (Unschedulable, then SchedulerError once answered Error), and other gangs' too: a new
    resourceVersion, the same spec. The remembered answer holds, or several infeasible gangs would
    keep each other out of the backoff and kube-scheduler would spin."""
    objects = cluster(
        pod_group("pg", 3),
        pod_group("other", 2),
        *(gpu_claim(f"c{i}", 2) for i in range(3)),
        *(member(f"m{i}", "pg", f"c{i}") for i in range(3)),
        nodes=2,
        gpus=2,
    )
    svc = service(objects, gang_retry_backoff=2)
    store = svc.backend.store  # type: ignore[attr-defined]
    answers = []
    for n in range(3):
        answers.append([svc.filter(member(f"m{i}", "pg", f"c{i}"), NODES[:2]) for i in range(3)])
        for name in ("pg", "other"):
            written = pod_group(name, 3 if name == "pg" else 2)
            written["metadata"]["resourceVersion"] = f"{100 + n}"
            reason = "SchedulerError" if n else "Unschedulable"
            written["status"] = {"conditions": [{"type": "PodGroupScheduled", "status": "False", "reason": reason}]}
            store.upsert(written)
    assert all(not a.failed and a.error for a in answers[2]), answers[2]
    assert svc.stats.gang_plans == {"infeasible": 1, "remembered": 2}


def test_members_beyond_what_fits_are_left_out_when_min_count_is_met() -> None:
    objects = cluster(
        pod_group("pg", 2),
        *(gpu_claim(f"c{i}", 2) for i in range(3)),
        *(member(f"m{i}", "pg", f"c{i}") for i in range(3)),
        nodes=2,
        gpus=2,
    )
    svc = service(objects)
    answers = [svc.filter(member(f"m{i}", "pg", f"c{i}"), NODES[:2]) for i in range(3)]
    placed = [a for a in answers if a.node_names]
    assert len(placed) == 2
    (left,) = [a for a in answers if not a.node_names]
    assert set(left.failed.values()) == {"gang default/pg complete without this member"}


def test_a_basic_group_and_switched_off_gangs_take_the_ordinary_path() -> None:
    objects = cluster(pod_group("basic", None), gpu_claim("c0", 1), member("m0", "basic", "c0"))
    assert service(objects).filter(member("m0", "basic", "c0"), NODES[:2]).node_names == NODES[:2]
    gang = cluster(pod_group("pg", 2), gpu_claim("c0", 1), member("m0", "pg", "c0"))
    off = SchedulingService(backend=EmbeddedBackend(copy.deepcopy(gang), gangs=False))
    assert off.filter(member("m0", "pg", "c0"), NODES[:2]).node_names == NODES[:2]


def test_a_member_whose_planned_node_is_not_offered_gets_the_gang_planned_again() -> None:
    """kube-scheduler's own filters may take a node away from a later member (CPU assumed by the
    members before it): the gang is planned again with the answered members kept where they are."""
    objects = cluster(
        pod_group("pg", 2),
        *(gpu_claim(f"c{i}", 1) for i in range(2)),
        *(member(f"m{i}", "pg", f"c{i}") for i in range(2)),
        nodes=3,
        gpus=2,
    )
    svc = service(objects)
    first = svc.filter(member("m0", "pg", "c0"), NODES).node_names
    plan = svc.gang_filter.passes["default/pg"].plan
    assert plan is not None
    planned_m1 = plan.node_of("default/m1")
    offered = [n for n in NODES if n != planned_m1]
    second = svc.filter(member("m1", "pg", "c1"), offered).node_names
    assert len(second) == 1 and second[0] in offered
    assert svc.gang_filter.passes["default/pg"].plans == 2
    assert svc.gang_filter.passes["default/pg"].answered["uid-m0"] == first[0]


def test_the_debug_view_shows_the_group_its_members_and_the_plan() -> None:
    objects = cluster(pod_group("pg", 2), gpu_claim("c0", 1), gpu_claim("c1", 1),
                      member("m0", "pg", "c0"), member("m1", "pg", "c1"))  # fmt: skip
    svc = service(objects)
    svc.filter(member("m0", "pg", "c0"), NODES[:2])
    view = DebugViews(svc).pod_group("default", "pg")
    assert view is not None
    assert (view["minCount"], view["waiting"], view["need"]) == (2, ["m0", "m1"], 2)
    placements = view["pass"]["plan"]["placements"]
    assert sorted(p["pod"] for p in placements) == ["default/m0", "default/m1"]
    node_of = {p["pod"]: p["node"] for p in placements}
    assert view["pass"]["answered"] == {"default/m0": node_of["default/m0"]}
    assert DebugViews(svc).pod_group("default", "nope") is None


def test_the_next_pass_plans_with_the_gangs_own_holds_whatever_claim_keys_they_were_made_under() -> None:
    """A template claim held before it existed is held under its provisional key; once the
    resourceclaim controller made it, the next pass must still count those holds as the gang's own
    (seen on v1.36.3: the first pass's binds failed and the next found its own devices taken)."""
    import dataclasses

    objects = cluster(
        pod_group("pg", 2),
        *(gpu_claim(f"c{i}", 2) for i in range(2)),
        *(member(f"m{i}", "pg", f"c{i}") for i in range(2)),
        nodes=2,
        gpus=2,
    )
    svc = service(objects)
    assert svc.filter(member("m0", "pg", "c0"), NODES[:2]).node_names
    for entry in list(svc.ledger):  # as if made for claims that did not exist yet
        svc.ledger.drop(entry.claim_key)
        claim = dataclasses.replace(svc.store.claims[entry.claim_key], name=f"{entry.claim_key} (not created yet)")
        svc.ledger.add(claim=claim, pod_key=entry.pod_key, pod_uid=entry.pod_uid, node=entry.node,
                       result=entry.result, tentative=True, provisional=True)  # fmt: skip
    again = svc.filter(member("m0", "pg", "c0"), NODES[:2])  # m0 answered already: the next pass
    assert again.node_names, again
    assert svc.stats.gang_plans == {"found": 2}


def rack_node(name: str, rack: str) -> dict[str, Any]:
    raw = node(name)
    raw["metadata"]["labels"]["example.com/rack"] = rack
    return raw


def racked(min_count: int, members: int, racks: dict[str, str], *, annotation: bool = True) -> list[dict[str, Any]]:
    """Nodes of 2 GPUs in ``racks`` (node -> rack), a gang asking for one rack, 2 GPUs per member."""
    group = pod_group("pg", min_count)
    if annotation:
        group["metadata"]["annotations"] = {"dra-extender.io/gang-topology-key": "example.com/rack"}
    objects = [*cluster(nodes=0), group]
    for name, rack in racks.items():
        objects += [rack_node(name, rack), gpu_slice(name, 2)]
    objects += [gpu_claim(f"c{i}", 2) for i in range(members)]
    objects += [member(f"m{i}", "pg", f"c{i}") for i in range(members)]
    return objects


def test_a_gang_that_asks_for_one_rack_lands_in_the_tightest_rack_that_fits() -> None:
    racks = {"n3": "r2", "n1": "r1", "n2": "r1", "n4": "r3", "n5": "r3", "n6": "r3"}
    svc = service(racked(2, 2, racks))
    order = list(racks)  # n3 first: without the rack, the plan would start there
    chosen = {svc.filter(member(f"m{i}", "pg", f"c{i}"), order).node_names[0] for i in range(2)}
    assert chosen == {"n1", "n2"}  # r2 (one node) cannot hold both, r1 (two) can, r3 (three) is looser
    assert svc.gang_filter.passes["default/pg"].domain == "r1"
    loose = service(racked(2, 2, racks, annotation=False))
    assert "n3" in {loose.filter(member(f"m{i}", "pg", f"c{i}"), order).node_names[0] for i in range(2)}


def test_a_gang_no_single_rack_can_hold_waits_with_the_reason() -> None:
    svc = service(racked(2, 2, {"n1": "r1", "n2": "r2", "n3": "r3"}))
    outcome = svc.filter(member("m0", "pg", "c0"), ["n1", "n2", "n3"])
    assert outcome.node_names == []
    assert set(outcome.failed.values()) == {
        "gang default/pg: 1 of 2 waiting members fit together (minCount 2) within one example.com/rack domain (3 tried)"
    }
    assert len(svc.ledger) == 0
    unlabelled = service(racked(2, 2, {"n1": "r1"}))
    unlabelled.backend.store.upsert(node("n9"))  # type: ignore[attr-defined]
    (reason,) = set(unlabelled.filter(member("m0", "pg", "c0"), ["n9"]).failed.values())
    assert reason.endswith("; no offered node has the label example.com/rack")


def test_a_placed_member_fixes_the_gangs_rack() -> None:
    """minCount 3 with one member bound in r2 already: the other two must go to r2 as well, though
    r1 is the tighter rack that would hold them."""
    racks = {"n1": "r1", "n2": "r1", "n3": "r2", "n4": "r2", "n5": "r2"}
    objects = racked(3, 3, racks)
    bound = next(o for o in objects if o["kind"] == "Pod" and o["metadata"]["name"] == "m2")
    bound["spec"]["nodeName"] = "n5"
    svc = service(objects)
    chosen = {svc.filter(member(f"m{i}", "pg", f"c{i}"), list(racks)).node_names[0] for i in range(2)}
    assert chosen == {"n3", "n4"}


async def test_kube_schedulers_topology_placements_after_the_planned_one_are_refused_and_the_plan_kept() -> None:
    """TopologyAwareWorkloadScheduling on: one cycle tries each rack as a placement, then binds the
    one it scores best. r1's placement is planned first; r2's (which could hold the gang as well)
    is refused without a new pass, so the plan's holds stay and its binds go through the barrier."""
    racks = {"n1": "r1", "n2": "r1", "n3": "r2", "n4": "r2"}
    svc = service(racked(2, 2, racks))
    first = [svc.filter(member(f"m{i}", "pg", f"c{i}"), ["n1", "n2"]).node_names for i in range(2)]
    assert sorted(n for nodes in first for n in nodes) == ["n1", "n2"]
    open_pass = svc.gang_filter.passes["default/pg"]
    holds = sorted((e.pod_uid, e.node) for e in svc.ledger)
    for i in range(2):
        refused = svc.filter(member(f"m{i}", "pg", f"c{i}"), ["n3", "n4"])
        assert refused.node_names == [] and set(refused.failed.values()) == {
            "gang default/pg placed in example.com/rack=r1"
        }
    assert svc.gang_filter.passes["default/pg"] is open_pass and svc.stats.gang_plans == {"found": 1}
    assert sorted((e.pod_uid, e.node) for e in svc.ledger) == holds
    await asyncio.gather(*(svc.bind("default", f"m{i}", f"uid-m{i}", first[i][0]) for i in range(2)))
    assert svc.stats.gang_barrier == {"opened": 1}
    # the next cycle offering r1 again starts a new pass as before
    fresh = service(racked(2, 2, racks))
    for _ in range(2):
        for i in range(2):
            assert fresh.filter(member(f"m{i}", "pg", f"c{i}"), ["n1", "n2"]).node_names
    assert fresh.stats.gang_plans == {"found": 2}


def test_a_planned_placement_kube_scheduler_could_not_complete_does_not_refuse_the_next() -> None:
    """kube-scheduler's own filters left m1 no node in r1 (CPU, say): it never asked us about m1 in
    that placement, which failed. r2's placement is then a fair try, planned afresh, and not
    refused in the name of r1."""
    racks = {"n1": "r1", "n2": "r1", "n3": "r2", "n4": "r2"}
    svc = service(racked(2, 2, racks))
    assert svc.filter(member("m0", "pg", "c0"), ["n1", "n2"]).node_names  # m1 never sent for r1
    answers = [svc.filter(member(f"m{i}", "pg", f"c{i}"), ["n3", "n4"]).node_names for i in range(2)]
    assert sorted(n for nodes in answers for n in nodes) == ["n3", "n4"]
    assert svc.gang_filter.passes["default/pg"].domain == "r2"


def three_nodes_one_gpu(*models: str) -> list[dict[str, Any]]:
    objects = [*cluster(nodes=0)]
    for i, model in enumerate(models, start=1):
        objects += [node(f"n{i}"), models_slice(f"n{i}", model)]
    return objects


def held_by(svc: SchedulingService) -> dict[str, list[str]]:
    """Pod UID -> the devices its holds take."""
    out: dict[str, list[str]] = {}
    for entry in svc.ledger:
        if entry.tentative:
            out.setdefault(entry.pod_uid, []).extend(f"{d.pool}/{d.device}" for d in entry.result.devices)
    return out


def test_a_re_plan_that_leaves_a_member_out_takes_its_hold_away() -> None:
    """A (any GPU) answered n1; B (any) offered only n3; C can only use n3's GPU. The re-plan puts
    B on n3 and leaves C out (minCount 2): C's old hold on n3 must go, or B's bind finds it taken."""
    objects = three_nodes_one_gpu("x", "x", "c")
    objects += [pod_group("pg", 2), gpu_claim("ca", 1), gpu_claim("cb", 1), gpu_claim("cc", 1, model="c")]
    objects += [member("a", "pg", "ca"), member("b", "pg", "cb"), member("c", "pg", "cc")]
    svc = service(objects)
    assert svc.filter(member("a", "pg", "ca"), ["n1", "n2", "n3"]).node_names == ["n1"]
    assert held_by(svc)["uid-c"] == ["n3/c-0"]
    assert svc.filter(member("b", "pg", "cb"), ["n3"]).node_names == ["n3"]
    holds = held_by(svc)
    assert holds.get("uid-b") == ["n3/c-0"] and "uid-c" not in holds
    (reason,) = set(svc.filter(member("c", "pg", "cc"), ["n1", "n2", "n3"]).failed.values())
    assert reason == "gang default/pg complete without this member"


def test_a_re_plan_keeps_every_node_of_the_pass_for_the_members_not_filtered_yet() -> None:
    objects = three_nodes_one_gpu("x", "x", "x")
    objects += [pod_group("pg", 3), *(gpu_claim(f"c{i}", 1) for i in range(3))]
    objects += [member(f"m{i}", "pg", f"c{i}") for i in range(3)]
    svc = service(objects)
    first = svc.filter(member("m0", "pg", "c0"), ["n1", "n2", "n3"]).node_names
    plan = svc.gang_filter.passes["default/pg"].plan
    assert plan is not None
    elsewhere = [n for n in ("n1", "n2", "n3") if n not in (first[0], plan.node_of("default/m1"))]
    # m1 is offered only the node planned for m2: m2 must still find the third node
    second = svc.filter(member("m1", "pg", "c1"), elsewhere).node_names
    third = svc.filter(member("m2", "pg", "c2"), ["n1", "n2", "n3"]).node_names
    assert sorted(first + second + third) == ["n1", "n2", "n3"]


def test_a_member_whose_claims_cannot_be_read_does_not_restart_the_pass_at_every_filter() -> None:
    objects = cluster(pod_group("pg", 2), gpu_claim("c0", 1), gpu_claim("c1", 1),
                      member("m0", "pg", "c0"), member("m1", "pg", "c1"), member("lost", "pg", "missing"))  # fmt: skip
    svc = service(objects)
    assert svc.filter(member("m0", "pg", "c0"), NODES[:2]).node_names
    assert svc.filter(member("m1", "pg", "c1"), NODES[:2]).node_names
    assert svc.stats.gang_plans == {"found": 1}


def test_a_pass_older_than_its_holds_is_planned_again() -> None:
    now = [1000.0]
    objects = cluster(pod_group("pg", 2), gpu_claim("c0", 1), gpu_claim("c1", 1),
                      member("m0", "pg", "c0"), member("m1", "pg", "c1"))  # fmt: skip
    svc = service(objects, clock=lambda: now[0], gang_hold_seconds=30)
    svc.filter(member("m0", "pg", "c0"), NODES[:2])
    now[0] += 31  # the holds have expired: m1 must not be answered from that plan
    svc.filter(member("m1", "pg", "c1"), NODES[:2])
    assert svc.stats.gang_plans == {"found": 2}


def test_answers_given_before_a_repeated_member_are_kept_by_the_next_plan() -> None:
    """kube-scheduler's pass 1 answered m0 only (its own filters stopped m1); pass 2 asks m1 first
    (answered from the open plan), then m0 (a repeat: a new plan starts). m1 was answered in this
    same pass: the new plan keeps it where it was answered."""
    objects = cluster(pod_group("pg", 2), gpu_claim("c0", 1), gpu_claim("c1", 1),
                      member("m0", "pg", "c0"), member("m1", "pg", "c1"), nodes=3, gpus=1)  # fmt: skip
    svc = service(objects)
    svc.filter(member("m0", "pg", "c0"), NODES)
    (m1_node,) = svc.filter(member("m1", "pg", "c1"), NODES).node_names
    (m0_node,) = svc.filter(member("m0", "pg", "c0"), NODES).node_names  # a new pass
    open_pass = svc.gang_filter.passes["default/pg"]
    assert open_pass.plans == 1 and svc.stats.gang_plans == {"found": 2}
    assert open_pass.answered["uid-m1"] == m1_node and open_pass.node_of("uid-m1") == m1_node
    assert m0_node != m1_node


def test_devices_taken_while_the_search_let_others_run_are_planned_around() -> None:
    """The plan is searched with pauses; a bind that takes one of its devices meanwhile (here: at
    the planner's first pause) must not leave the gang holding it too."""
    from extender.state.filter.gangs import GangFilter

    objects = cluster(pod_group("pg", 2), gpu_claim("c0", 1), gpu_claim("c1", 1), gpu_claim("other", 1),
                      member("m0", "pg", "c0"), member("m1", "pg", "c1"), nodes=2, gpus=2)  # fmt: skip
    svc = service(objects)
    taken: list[str] = []

    def meanwhile() -> None:
        if taken:
            return
        claim = svc.store.claims["default/other"]
        result = AllocationResult(devices=(DeviceResult(request="gpus", driver="gpu.example.com", pool="node-1",
                                                        device="gpu-0"),))  # fmt: skip
        svc.ledger.add(claim=claim, pod_key="default/p", pod_uid="uid-p", node="node-1", result=result)
        taken.append("node-1/gpu-0")

    svc.gang_filter = GangFilter(
        cluster=svc.cluster, gangs=svc.gangs, verdicts=svc.verdicts, stats=svc.stats, pace=lambda: meanwhile
    )
    svc.filter(member("m0", "pg", "c0"), NODES[:2])
    assert taken
    held = [d for devices in held_by(svc).values() for d in devices]
    assert "node-1/gpu-0" not in held and len(held) == 2


def test_a_repeated_pass_plans_once_however_many_answers_it_took_over() -> None:
    objects = cluster(pod_group("pg", 3), *(gpu_claim(f"c{i}", 1) for i in range(3)),
                      *(member(f"m{i}", "pg", f"c{i}") for i in range(3)), nodes=3, gpus=1)  # fmt: skip
    svc = service(objects)
    for _ in range(2):  # kube-scheduler's pass, twice, in one order
        answers = [svc.filter(member(f"m{i}", "pg", f"c{i}"), NODES).node_names for i in range(3)]
        assert sorted(n for a in answers for n in a) == NODES
    assert svc.stats.gang_plans == {"found": 2}


def test_a_deleted_pod_groups_holds_are_given_back() -> None:
    objects = cluster(pod_group("pg", 2), pod_group("other", 2), gpu_claim("c0", 1), gpu_claim("c1", 1),
                      gpu_claim("o0", 1), gpu_claim("o1", 1), member("m0", "pg", "c0"), member("m1", "pg", "c1"),
                      member("o0", "other", "o0"), member("o1", "other", "o1"))  # fmt: skip
    svc = service(objects)
    svc.filter(member("m0", "pg", "c0"), NODES[:2])
    assert set(held_by(svc)) == {"uid-m0", "uid-m1"}
    svc.backend.store.delete("PodGroup", "default", "pg")  # type: ignore[attr-defined]
    svc.filter(member("o0", "other", "o0"), NODES[:2])
    assert set(held_by(svc)) == {"uid-o0", "uid-o1"}


def test_a_remembered_refusal_ends_when_a_hold_that_caused_it_expires() -> None:
    """Nothing else changes on an idle cluster: the hold's expiry alone must end the memory."""
    now = [1000.0]
    objects = cluster(pod_group("pg", 2), gpu_claim("c0", 2), gpu_claim("c1", 2), gpu_claim("other", 2),
                      member("m0", "pg", "c0"), member("m1", "pg", "c1"), nodes=2, gpus=2)  # fmt: skip
    svc = service(objects, clock=lambda: now[0], gang_retry_backoff=0)
    other = svc.store.claims["default/other"]
    result = AllocationResult(
        devices=tuple(DeviceResult(request="gpus", driver="gpu.example.com", pool="node-1", device=f"gpu-{i}")
                      for i in range(2))
    )  # fmt: skip
    svc.ledger.add(claim=other, pod_key="default/p", pod_uid="uid-p", node="node-1", result=result,
                   tentative=True, ttl_seconds=2)  # fmt: skip
    assert svc.filter(member("m0", "pg", "c0"), NODES[:2]).node_names == []
    assert svc.filter(member("m0", "pg", "c0"), NODES[:2]).node_names == []  # remembered
    now[0] += 3  # the other pod's hold expires; nothing else happens
    assert svc.filter(member("m0", "pg", "c0"), NODES[:2]).node_names
    assert svc.stats.gang_plans == {"infeasible": 1, "remembered": 1, "found": 1}


def test_explain_shows_the_gang_verdict_of_a_member_and_changes_nothing() -> None:
    from extender.views.explanation import explain_pod

    objects = cluster(pod_group("pg", 3), *(gpu_claim(f"c{i}", 2) for i in range(3)),
                      *(member(f"m{i}", "pg", f"c{i}") for i in range(3)), nodes=2, gpus=2)  # fmt: skip
    svc = service(objects)
    svc.filter(member("m0", "pg", "c0"), NODES[:2])
    ledger_before = svc.ledger.changes
    gang = explain_pod(svc, member("m1", "pg", "c1"), NODES[:2]).to_dict()["gang"]
    assert (gang["podGroup"], gang["minCount"], gang["need"], gang["plannedNode"]) == ("default/pg", 3, 3, None)
    assert gang["reason"] == "gang default/pg: 2 of 3 waiting members fit together (minCount 3)"
    assert svc.ledger.changes == ledger_before and svc.stats.gang_plans == {"infeasible": 1}
    assert "gang" not in explain_pod(svc, pod("loner"), NODES[:2]).to_dict()


def fabric_objects(extra_r1_node: bool = False) -> list[dict[str, Any]]:
    """Racks r1 = {n1, n2} (4 GPUs each; ``n5`` too with ``extra_r1_node``) and r2 = {n3 (4 GPUs),
    n4 (2)}; one fabric device per rack (``domain-r1``, ``domain-r2``), reachable from its rack's
    nodes only (spec E4)."""
    objects = [*cluster(nodes=0)]
    nodes = [("n3", "r2", 4), ("n4", "r2", 2), ("n1", "r1", 4), ("n2", "r1", 4)]
    for name, rack, count in nodes + ([("n5", "r1", 4)] if extra_r1_node else []):
        objects += [rack_node(name, rack), gpu_slice(name, count)]
    objects.append(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "fabric"},
            "spec": {"selectors": [{"cel": {"expression": 'device.driver == "fabric.example.com"'}}]},
        }
    )
    for rack in ("r1", "r2"):
        objects.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"fabric-{rack}"},
                "spec": {
                    "driver": "fabric.example.com",
                    "pool": {"name": f"fabric-{rack}", "generation": 1, "resourceSliceCount": 1},
                    "nodeSelector": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "example.com/rack", "operator": "In", "values": [rack]}]}
                        ]
                    },
                    "devices": [{"name": f"domain-{rack}"}],
                },
            }
        )
    domain = claim("pg-domain", 1, cls="fabric")
    group = pod_group("pg", 2)
    group["spec"]["resourceClaims"] = [{"name": "domain", "resourceClaimName": "pg-domain"}]
    objects += [domain, group, gpu_claim("c0", 4), gpu_claim("c1", 4)]
    for i in range(2):
        raw = member(f"m{i}", "pg", f"c{i}")
        raw["spec"]["resourceClaims"].append({"name": "domain", "resourceClaimName": "pg-domain"})
        objects.append(raw)
    return objects


def fabric_member(i: int) -> dict[str, Any]:
    raw = member(f"m{i}", "pg", f"c{i}")
    raw["spec"]["resourceClaims"].append({"name": "domain", "resourceClaimName": "pg-domain"})
    return raw


async def test_a_pod_group_claim_is_allocated_once_for_the_group_where_the_whole_gang_fits() -> None:
    """Spec E4b, with the extender: the first member's preferred nodes are in rack r2, where the gang
    does not fit; the group's claim goes to ``domain-r1``, both members to r1, reserved for the
    PodGroup (not a pod), written once though the members' binds run together (F2, F3, F4)."""
    svc = service(fabric_objects())
    order = ["n3", "n4", "n1", "n2"]
    chosen = [svc.filter(fabric_member(i), order).node_names for i in range(2)]
    assert sorted(n for c in chosen for n in c) == ["n1", "n2"]
    await asyncio.gather(*(svc.bind("default", f"m{i}", f"uid-m{i}", chosen[i][0]) for i in range(2)))
    views = DebugViews(svc)
    domain = views.claim("default", "pg-domain")
    assert domain is not None
    assert [r["device"] for r in domain["status"]["allocation"]["devices"]["results"]] == ["domain-r1"]
    assert domain["status"]["reservedFor"] == [
        {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "pg", "uid": "uid-pg"}
    ]
    for i in range(2):
        own = views.claim("default", f"c{i}")
        assert own is not None and {r["pool"] for r in own["status"]["allocation"]["devices"]["results"]} == {
            chosen[i][0]
        }
        assert views.pod("default", f"m{i}")["spec"]["nodeName"] == chosen[i][0]  # type: ignore[index]
    assert svc.stats.allocations == 3  # the group's claim once, each member's own


def test_a_pod_group_claim_made_for_someone_else_is_refused() -> None:
    objects = fabric_objects()
    domain = next(o for o in objects if o["kind"] == "ResourceClaim" and o["metadata"]["name"] == "pg-domain")
    group = next(o for o in objects if o["kind"] == "PodGroup")
    group["spec"]["resourceClaims"] = [{"name": "domain", "resourceClaimTemplateName": "domain-template"}]
    group["status"] = {"resourceClaimStatuses": [{"name": "domain", "resourceClaimName": "pg-domain"}]}
    domain["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "x", "uid": "not-the-group", "controller": True}
    ]
    stored = next(o for o in objects if o["kind"] == "Pod" and o["metadata"]["name"] == "m0")
    stored["spec"]["resourceClaims"][-1] = {"name": "domain", "resourceClaimTemplateName": "domain-template"}
    svc = service(objects)
    outcome = svc.filter(copy.deepcopy(stored), ["n1", "n2"])
    assert "was not created for pod group default/pg (pod group is not owner)" in outcome.error


async def test_a_member_bound_first_or_last_uses_the_group_claim_the_plan_chose() -> None:
    """The second member in plan order binds first: the group claim's hold (under the first
    member) is dropped by this bind, which allocates the claim as planned."""
    svc = service(fabric_objects())
    chosen = [svc.filter(fabric_member(i), ["n3", "n4", "n1", "n2"]).node_names[0] for i in range(2)]
    await asyncio.gather(*(svc.bind("default", f"m{i}", f"uid-m{i}", chosen[i]) for i in (1, 0)))
    domain = DebugViews(svc).claim("default", "pg-domain")
    assert domain is not None
    assert [r["device"] for r in domain["status"]["allocation"]["devices"]["results"]] == ["domain-r1"]
    assert len(svc.ledger) == 0


def test_a_re_plan_with_a_group_claim_plans_it_once() -> None:
    """A member's planned node is taken away by kube-scheduler's own filters: the gang is planned
    again with the group's claim still planned once (not once more per member)."""
    svc = service(fabric_objects(extra_r1_node=True))
    first = svc.filter(fabric_member(0), ["n3", "n4", "n1", "n2", "n5"]).node_names
    open_pass = svc.gang_filter.passes["default/pg"]
    assert open_pass.plan is not None
    planned_m1 = open_pass.plan.node_of("default/m1")
    offered = [n for n in ("n1", "n2", "n5") if n not in (first[0], planned_m1)]
    second = svc.filter(fabric_member(1), offered).node_names
    assert second == offered and open_pass.plans == 2
    assert open_pass.plan is not None and len(open_pass.plan.shared) == 1
    assert held_by(svc)  # the plan's devices held again, the group's claim among them


async def test_a_failed_binding_leaves_the_group_claim_to_the_group() -> None:
    """Upstream's Unreserve never takes a PodGroup's reservation back: other members may be bound
    on it. A member whose binding fails after the gang's claims were all written (the barrier open)
    rolls back its own claim only; the other member is bound."""
    from extender.core.errors import ApiUnavailable

    svc = service(fabric_objects())
    chosen = [svc.filter(fabric_member(i), ["n3", "n4", "n1", "n2"]).node_names[0] for i in range(2)]
    svc.backend.faults.fail("bind_pod", ApiUnavailable("injected"))  # type: ignore[attr-defined]
    outcomes = await asyncio.gather(
        *(svc.bind("default", f"m{i}", f"uid-m{i}", chosen[i]) for i in range(2)), return_exceptions=True
    )
    failed = [i for i, outcome in enumerate(outcomes) if isinstance(outcome, ExtenderError)]
    assert len(failed) == 1 and outcomes[1 - failed[0]] is None
    views = DebugViews(svc)
    domain, own = views.claim("default", "pg-domain"), views.claim("default", f"c{failed[0]}")
    assert domain is not None and own is not None
    assert domain["status"]["reservedFor"][0]["resource"] == "podgroups"
    assert not (own.get("status") or {}).get("allocation")
    bound = 1 - failed[0]
    assert views.pod("default", f"m{bound}")["spec"]["nodeName"] == chosen[bound]  # type: ignore[index]
    assert svc.stats.gang_barrier == {"opened": 1}


def gang_of(size: int, *, nodes: int) -> list[dict[str, Any]]:
    """A gang of ``size`` members (minCount ``size``), two GPUs each, on ``nodes`` nodes of two GPUs."""
    return cluster(
        pod_group("pg", size),
        *(gpu_claim(f"c{i}", 2) for i in range(size)),
        *(member(f"m{i}", "pg", f"c{i}") for i in range(size)),
        nodes=nodes,
        gpus=2,
    )


def two_member_gang() -> list[dict[str, Any]]:
    return gang_of(2, nodes=2)


def nominate_node_1(svc: SchedulingService, pod_key: str, uid: str) -> None:
    """Both GPUs of node-1 nominated for ``pod_key`` (priority 0)."""
    from extender.state.cache.nominations import Nomination

    nominations = svc.cluster.nominations
    held = tuple(
        DeviceResult(request="gpus", driver="gpu.example.com", pool="node-1", device=f"gpu-{i}") for i in (0, 1)
    )
    nominations.add(
        Nomination(
            pod_key=pod_key, pod_uid=uid, priority=0, node="node-1", results=(AllocationResult(devices=held),),
            victims=(), freed=frozenset(), expires=nominations.clock() + 60,
        )
    )  # fmt: skip


async def test_a_claim_write_failing_for_one_member_leaves_no_member_bound() -> None:
    """F5: without the barrier the other member would be bound already (upstream: a partial gang,
    its PodGroup Scheduled). With it, every member's writes are undone and every bind fails."""
    from extender.core.errors import ApiUnavailable

    svc = service(two_member_gang())
    chosen = {f"m{i}": svc.filter(member(f"m{i}", "pg", f"c{i}"), NODES[:2]).node_names[0] for i in range(2)}
    # the second claim status write fails (whichever member's it is)
    svc.backend.faults.fail("update_claim_status", ApiUnavailable("injected"), after=1)  # type: ignore[attr-defined]
    outcomes = await asyncio.gather(
        *(svc.bind("default", name, f"uid-{name}", node) for name, node in chosen.items()), return_exceptions=True
    )
    assert all(isinstance(outcome, ExtenderError) for outcome in outcomes)
    reasons = sorted((outcome.reason for outcome in outcomes if isinstance(outcome, ExtenderError)), key=len)
    assert reasons[0] == "injected"
    assert reasons[1].startswith("gang default/pg: no member is bound because the bind of m")
    assert reasons[1].endswith("failed: injected")
    views = DebugViews(svc)
    for i in range(2):
        assert not views.pod("default", f"m{i}")["spec"].get("nodeName")  # type: ignore[index]
        raw = views.claim("default", f"c{i}")
        assert raw is not None and not (raw.get("status") or {}).get("allocation")
    assert svc.backend.faults.calls["bind_pod"] == 0  # type: ignore[attr-defined]
    assert len(svc.ledger) == 0
    assert svc.stats.gang_barrier == {"aborted": 1}
    # the next pass plans and binds the gang whole
    chosen = {f"m{i}": svc.filter(member(f"m{i}", "pg", f"c{i}"), NODES[:2]).node_names[0] for i in range(2)}
    await asyncio.gather(*(svc.bind("default", name, f"uid-{name}", node) for name, node in chosen.items()))
    assert all(views.pod("default", name)["spec"]["nodeName"] == node for name, node in chosen.items())  # type: ignore[index]


async def test_a_member_whose_bind_never_comes_is_left_out_after_the_wait() -> None:
    svc = service(two_member_gang(), gang_barrier_seconds=0.01)
    chosen = {f"m{i}": svc.filter(member(f"m{i}", "pg", f"c{i}"), NODES[:2]).node_names[0] for i in range(2)}
    await svc.bind("default", "m0", "uid-m0", chosen["m0"])  # m1's bind never comes
    assert DebugViews(svc).pod("default", "m0")["spec"]["nodeName"] == chosen["m0"]  # type: ignore[index]
    assert svc.stats.gang_barrier == {"partial": 1, "opened": 1}
    assert svc.binder.barrier is not None and svc.binder.barrier.rounds["default/pg"].over
    await svc.bind("default", "m1", "uid-m1", chosen["m1"])  # a straggler binds alone
    assert DebugViews(svc).pod("default", "m1")["spec"]["nodeName"] == chosen["m1"]  # type: ignore[index]


async def test_with_the_barrier_off_each_member_binds_on_its_own() -> None:
    from extender.core.errors import ApiUnavailable

    svc = service(two_member_gang(), gang_barrier_seconds=0)
    chosen = {f"m{i}": svc.filter(member(f"m{i}", "pg", f"c{i}"), NODES[:2]).node_names[0] for i in range(2)}
    await svc.bind("default", "m0", "uid-m0", chosen["m0"])
    svc.backend.faults.fail("update_claim_status", ApiUnavailable("injected"))  # type: ignore[attr-defined]
    with pytest.raises(ExtenderError, match="injected"):
        await svc.bind("default", "m1", "uid-m1", chosen["m1"])
    assert DebugViews(svc).pod("default", "m0")["spec"]["nodeName"] == chosen["m0"]  # type: ignore[index]
    assert svc.stats.gang_barrier == {}


def stuck_in_r2(reserved_for: list[dict[str, str]]) -> list[dict[str, Any]]:
    """Spec E4 with the group's claim already allocated to ``domain-r2`` (a gang that ran there and
    left, say), where the gang does not fit now."""
    objects = fabric_objects()
    domain = next(o for o in objects if o["kind"] == "ResourceClaim" and o["metadata"]["name"] == "pg-domain")
    domain["metadata"]["uid"] = "uid-pg-domain"
    domain["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpus", "driver": "fabric.example.com", "pool": "fabric-r2", "device": "domain-r2"}
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "example.com/rack", "operator": "In", "values": ["r2"]}]}
                ]
            },
        },
        "reservedFor": reserved_for,
    }
    return objects


GROUP_CONSUMER = {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "pg", "uid": "uid-pg"}


async def test_a_group_claim_allocated_where_the_gang_cannot_go_is_freed_when_no_member_is_placed() -> None:
    """Spec F7: upstream keeps a PodGroup claim allocated until the PodGroup goes. With no member
    placed and the claim reserved for the group alone, a gang that would fit with it freed gets it
    deallocated (``Error``: kube-scheduler retries), and the next pass places the gang in r1."""
    svc = service(stuck_in_r2([GROUP_CONSUMER]))
    order = ["n3", "n4", "n1", "n2"]
    outcome = await svc.filter_and_recover(fabric_member(0), order)
    assert outcome.error == "deallocation of ResourceClaim default/pg-domain completed for gang default/pg"
    domain = DebugViews(svc).claim("default", "pg-domain")
    assert domain is not None and not domain["status"].get("allocation") and not domain["status"].get("reservedFor")
    chosen = [(await svc.filter_and_recover(fabric_member(i), order)).node_names for i in range(2)]
    assert sorted(n for c in chosen for n in c) == ["n1", "n2"]


@pytest.mark.parametrize(
    "reserved_for",
    [
        [GROUP_CONSUMER, {"resource": "pods", "name": "someone", "uid": "uid-someone"}],
        [{**GROUP_CONSUMER, "name": "other", "uid": "uid-other"}],
    ],
    ids=["also-used-by-a-pod", "another-groups"],
)
async def test_a_group_claim_someone_else_uses_is_never_freed(reserved_for: list[dict[str, str]]) -> None:
    svc = service(stuck_in_r2(reserved_for))
    outcome = await svc.filter_and_recover(fabric_member(0), ["n3", "n4", "n1", "n2"])
    assert "deallocation" not in outcome.error and not outcome.node_names
    domain = DebugViews(svc).claim("default", "pg-domain")
    assert domain is not None and domain["status"]["allocation"]


async def test_a_group_claim_is_kept_while_a_member_is_placed() -> None:
    objects = stuck_in_r2([GROUP_CONSUMER])
    bound = next(o for o in objects if o["kind"] == "Pod" and o["metadata"]["name"] == "m1")
    bound["spec"]["nodeName"] = "n3"
    svc = service(objects)
    # n3 is offered no more (kube-scheduler's own filters): m0 fits nowhere in r2, and would in r1
    outcome = await svc.filter_and_recover(fabric_member(0), ["n4", "n1", "n2"])
    assert "deallocation" not in outcome.error and not outcome.node_names
    domain = DebugViews(svc).claim("default", "pg-domain")
    assert domain is not None and domain["status"]["allocation"]


async def test_the_preempt_verb_evicts_nothing_for_one_member_of_a_gang() -> None:
    """kube-scheduler's per-member preemption (workload-aware preemption off) would evict for one
    member of a gang that may still not fit (KEP-5710: all or nothing): no node is answered. A pod
    of no group is answered as before."""
    from extender.state.preemption.verb import NodeVictims

    objects = two_member_gang()
    objects += [gpu_claim("solo", 2), pod("solo", "solo")]
    svc = service(objects)
    victims = {"node-1": NodeVictims(("uid-victim",))}
    outcome = await svc.preempt(member("m0", "pg", "c0"), victims)
    assert outcome.victims == {} and not outcome.error
    assert (await svc.preempt(pod("solo", "solo"), victims)).victims == victims


async def test_a_member_whose_bind_comes_after_another_failed_is_not_bound_alone() -> None:
    """The first member's bind fails at its decision (no API call: it is over before the next
    bind comes); the second member of the same pass fails at once rather than being bound alone."""
    svc = service(two_member_gang())
    chosen = {f"m{i}": svc.filter(member(f"m{i}", "pg", f"c{i}"), NODES[:2]).node_names[0] for i in range(2)}
    with pytest.raises(ExtenderError):
        await svc.bind("default", "m0", "uid-m0", chosen["m1"])  # m1's devices are held there
    with pytest.raises(ExtenderError, match="no member is bound because the bind of m0 failed"):
        await svc.bind("default", "m1", "uid-m1", chosen["m1"])
    views = DebugViews(svc)
    assert not any(views.pod("default", f"m{i}")["spec"].get("nodeName") for i in range(2))  # type: ignore[index]
    assert svc.backend.faults.calls["update_claim"] == 0  # type: ignore[attr-defined]
    assert svc.stats.gang_barrier == {"aborted": 1}


async def test_three_members_bind_together_and_the_round_counts_once() -> None:
    svc = service(gang_of(3, nodes=3))
    chosen = {f"m{i}": svc.filter(member(f"m{i}", "pg", f"c{i}"), NODES).node_names[0] for i in range(3)}
    await asyncio.gather(*(svc.bind("default", name, f"uid-{name}", node) for name, node in chosen.items()))
    views = DebugViews(svc)
    assert {views.pod("default", name)["spec"]["nodeName"] for name in chosen} == set(NODES)  # type: ignore[index]
    assert svc.stats.gang_barrier == {"opened": 1}


def test_why_and_the_device_map_name_the_pod_group_a_device_is_reserved_for() -> None:
    from extender.views.devicemap import DeviceMap
    from extender.views.why import why

    objects = stuck_in_r2([GROUP_CONSUMER])
    objects += [claim("other-fabric", 1, cls="fabric"), pod("other", "other-fabric")]
    svc = service(objects)
    doc = why(DebugViews(svc), pod("other", "other-fabric"), ["n3"])
    messages = [s["message"] for s in doc["suggestions"]]
    assert any("held by default/pg-domain (pod group default/pg)" in m for m in messages), messages
    detail = DeviceMap(svc.cluster, svc.stats, DebugViews(svc)).node("n3")
    assert detail is not None
    held = [c for d in detail["devices"] for c in d["claims"] if c["claim"] == "default/pg-domain"]
    assert held and held[0]["podGroups"] == ["default/pg"] and held[0]["pods"] == []


def test_a_plan_leaves_alone_the_devices_nominated_for_a_preemptor_of_higher_priority() -> None:
    objects = gang_of(2, nodes=3)
    svc = service(objects)
    nominate_node_1(svc, "default/urgent", "uid-urgent")
    chosen = {svc.filter(member(f"m{i}", "pg", f"c{i}"), NODES).node_names[0] for i in range(2)}
    assert chosen == {"node-2", "node-3"}  # equal priority: the preemptor's (as a member's bind)
    # a PodGroup of higher priority than the preemptor's may plan on them (spec.priority counts)
    next(o for o in objects if o["kind"] == "PodGroup")["spec"]["priority"] = 1000
    svc = service(objects)
    nominate_node_1(svc, "default/urgent", "uid-urgent")
    chosen = {svc.filter(member(f"m{i}", "pg", f"c{i}"), NODES[:2]).node_names[0] for i in range(2)}
    assert chosen == {"node-1", "node-2"}


def test_a_members_own_nomination_does_not_keep_its_gang_out() -> None:
    svc = service(gang_of(2, nodes=2))
    nominate_node_1(svc, "default/m0", "uid-m0")
    chosen = {svc.filter(member(f"m{i}", "pg", f"c{i}"), NODES[:2]).node_names[0] for i in range(2)}
    assert chosen == {"node-1", "node-2"}


async def test_a_group_claim_is_not_freed_when_the_gang_would_not_fit_anyway() -> None:
    svc = service(stuck_in_r2([GROUP_CONSUMER]))
    outcome = await svc.filter_and_recover(fabric_member(0), ["n3", "n4"])  # r1 is not offered
    assert "deallocation" not in outcome.error and not outcome.node_names
    domain = DebugViews(svc).claim("default", "pg-domain")
    assert domain is not None and domain["status"]["allocation"]


async def test_the_release_of_a_group_claim_is_refused_once_the_claim_was_allocated_anew() -> None:
    from extender.core.model import ResourceClaim
    from extender.state.bind.claim_writes import deallocate

    svc = service(stuck_in_r2([GROUP_CONSUMER]))
    seen = svc.store.claims["default/pg-domain"]
    assert seen.allocation is not None
    other = DeviceResult(request="gpus", driver="fabric.example.com", pool="fabric-r1", device="domain-r1")
    stale = ResourceClaim(
        namespace=seen.namespace, name=seen.name, uid=seen.uid, allocation=AllocationResult(devices=(other,))
    )
    with pytest.raises(ExtenderError, match="allocated anew"):
        await deallocate(svc.backend, seen, "uid-pg", expected=stale)
    await deallocate(svc.backend, seen, "uid-pg", expected=seen)
    domain = DebugViews(svc).claim("default", "pg-domain")
    assert domain is not None and not domain["status"].get("allocation")


def test_why_names_both_the_pods_and_the_pod_group_a_claim_is_reserved_for() -> None:
    from extender.views.why import why

    objects = stuck_in_r2([GROUP_CONSUMER, {"resource": "pods", "name": "someone", "uid": "uid-someone"}])
    objects += [claim("other-fabric", 1, cls="fabric"), pod("other", "other-fabric")]
    svc = service(objects)
    messages = [s["message"] for s in why(DebugViews(svc), pod("other", "other-fabric"), ["n3"])["suggestions"]]
    assert any("default/pg-domain (pod default/someone; pod group default/pg)" in m for m in messages), messages


@pytest.mark.parametrize("same_spec", [True, False], ids=["moved", "another-spec"])
async def test_a_member_whose_own_template_claim_the_controller_replaced(same_spec: bool) -> None:
    """kubernetes#140217 for a gang's member: besides its PodGroup's claim, the member's status names
    its own template claim; when kube-controller-manager 1.36 made a second claim and named that one
    before the binding, the bind moves the devices to it where it was made from the same spec, as
    for any pod; otherwise it undoes its writes and fails the attempt (docs/pipeline.md, the writes),
    instead of binding a member whose claim nothing allocated. Either way the PodGroup's claim stays
    allocated and reserved for the group (an undo never takes a group's reservation back)."""
    objects = [
        o
        for o in fabric_objects()
        if o["kind"] not in ("Pod", "PodGroup") and o["metadata"]["name"] not in ("c0", "c1")
    ]
    group = pod_group("pg", 1)
    group["spec"]["resourceClaims"] = [{"name": "domain", "resourceClaimName": "pg-domain"}]
    own = member("m0", "pg")
    own["spec"]["resourceClaims"] = [
        {"name": "t0", "resourceClaimTemplateName": "gpu-template"},
        {"name": "domain", "resourceClaimName": "pg-domain"},
    ]
    svc = service([*objects, template("gpu-template"), group, own])
    backend = svc.backend
    assert isinstance(backend, EmbeddedBackend)
    made = backend.get("Pod", "default", "m0")
    assert made is not None
    first = made["status"]["resourceClaimStatuses"][0]["resourceClaimName"]  # the embedded controller's
    (chosen,) = svc.filter(backend.get("Pod", "default", "m0"), ["n3", "n4", "n1", "n2"]).node_names
    replaced: list[str] = []

    async def replace_the_claim(_operation: str) -> None:
        if replaced:
            return
        second = copy.deepcopy(backend.get("ResourceClaim", "default", first))
        assert second is not None
        second["metadata"] = {**second["metadata"], "name": "m0-t0-other"}
        for field in ("uid", "resourceVersion", "creationTimestamp"):
            second["metadata"].pop(field, None)
        second.pop("status", None)
        if not same_spec:
            second["spec"]["devices"]["requests"][0]["name"] = "other"
        backend.apply(second)
        pod = backend.get("Pod", "default", "m0")
        assert pod is not None
        pod["status"]["resourceClaimStatuses"] = [{"name": "t0", "resourceClaimName": "m0-t0-other"}]
        backend.apply(pod)
        replaced.append("m0-t0-other")

    backend.faults.hook("update_claim_status", replace_the_claim)
    devices_of_first: list[str] = []
    real_update = backend.update_claim_status

    async def watching(raw: dict[str, Any]) -> dict[str, Any]:
        answer = await real_update(raw)
        if raw["metadata"]["name"] == first and (raw.get("status") or {}).get("allocation"):
            devices_of_first[:] = [r["device"] for r in raw["status"]["allocation"]["devices"]["results"]]
        return answer

    backend.update_claim_status = watching  # type: ignore[method-assign]
    if same_spec:
        await svc.bind("default", "m0", "uid-m0", chosen)
        assert (backend.get("Pod", "default", "m0") or {})["spec"].get("nodeName") == chosen
        moved = backend.get("ResourceClaim", "default", "m0-t0-other")
        assert moved is not None and moved["status"]["reservedFor"][0]["uid"] == "uid-m0"
        assert [r["device"] for r in moved["status"]["allocation"]["devices"]["results"]] == devices_of_first
        assert devices_of_first and svc.stats.replaced_claims.get("moved", 0) == 1
    else:
        with pytest.raises(Transient, match="its status names ResourceClaim m0-t0-other"):
            await svc.bind("default", "m0", "uid-m0", chosen)
        assert not (backend.get("Pod", "default", "m0") or {})["spec"].get("nodeName")
    assert replaced
    undone = backend.get("ResourceClaim", "default", first)
    assert undone is not None and not (undone.get("status") or {}).get("allocation")
    domain = backend.get("ResourceClaim", "default", "pg-domain")
    assert domain is not None
    assert domain["status"]["allocation"] and domain["status"]["reservedFor"][0]["resource"] == "podgroups"
