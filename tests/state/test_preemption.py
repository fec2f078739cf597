"""Device-aware preemption in the embedded backend (issue 15, spec/preemption.md §2.4-§2.7): a pod
that no node fits only because lower-priority pods hold the devices evicts a minimal set of
them, gets the freed devices held for it, and nobody of equal or lower priority takes them."""

from __future__ import annotations

import copy
import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from extender.backends.embedded import EmbeddedBackend
from extender.core.errors import ApiUnavailable, PodUnschedulable
from extender.core.preemption import Victim, choose_victims
from extender.state.preemption.devices import MAX_REFUSALS, WAITING_FOR_VICTIMS, holding_pods
from extender.state.service import SchedulingService
from extender.views.debug import DebugViews
from tests import manifests as m

NODES = ["node-1", "node-2"]


def prio_pod(name: str, priority: int, *claims: str, **spec: Any) -> dict[str, Any]:
    pod = m.pod(name, *claims)
    pod["spec"]["priority"] = priority
    pod["spec"].update(spec)
    pod["metadata"]["labels"] = {"app": name}
    return pod


class Cluster:
    """Two nodes of two GPUs, all four held by pods of priority 100 (``low-1`` … ``low-4``)."""

    def __init__(self, *extra: dict[str, Any], low_priority: int = 100, preemption: bool = True) -> None:
        objects = m.cluster(*[m.claim(f"lc{i}") for i in range(1, 5)], *extra)
        objects += [prio_pod(f"low-{i}", low_priority, f"lc{i}") for i in range(1, 5)]
        self.backend = EmbeddedBackend(copy.deepcopy(objects))
        self.service = SchedulingService(backend=self.backend, hold_seconds=0, preemption=preemption)

    async def place_low_pods(self) -> None:
        for i, node in zip(range(1, 5), ["node-1", "node-1", "node-2", "node-2"], strict=True):
            await self.service.bind("default", f"low-{i}", f"uid-low-{i}", node)

    def add(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self.backend.apply(obj)

    async def filter(self, name: str, nodes: list[str] = NODES) -> Any:
        raw = self.backend.get("Pod", "default", name)
        assert raw is not None
        return await self.service.filter_and_recover(raw, nodes)

    def pods(self) -> set[str]:
        return {p["metadata"]["name"] for p in self.backend.list_objects("Pod")}


async def started(*extra: dict[str, Any], **options: Any) -> Cluster:
    cluster = Cluster(*extra, **options)
    await cluster.place_low_pods()
    return cluster


async def test_a_high_priority_pod_evicts_exactly_one_holder_and_gets_its_device() -> None:
    c = await started(m.claim("hc"), prio_pod("high", 1000, "hc"))
    first = await c.filter("high")
    assert first.node_names == [] and not first.error
    [node] = [n for n, reason in first.failed.items() if reason.startswith(WAITING_FOR_VICTIMS)]
    gone = {f"low-{i}" for i in range(1, 5)} - c.pods()
    assert len(gone) == 1  # exactly one victim, on the node the plan chose
    victim = gone.pop()
    assert c.backend.get("Pod", "default", "high")["status"]["nominatedNodeName"] == node  # type: ignore[index]
    events = [(pod, reason) for pod, _, reason, _ in c.backend.events]
    assert (f"default/{victim}", "Preempted") in events and ("default/high", "Preempting") in events
    # a pod of lower priority that comes now cannot take the freed device
    c.add(m.claim("tc"))
    c.add(prio_pod("third", 100, "tc"))
    third = await c.filter("third")
    assert third.node_names == [] and "nominated for preemptor default/high" in third.failed[node]
    # the preemptor's next attempt fits there and binds
    again = await c.filter("high")
    assert again.node_names == [node]
    await c.service.bind("default", "high", "uid-high", node)
    assert not c.service.cluster.nominations
    assert c.service.preemption.stats.victims == 1


async def test_no_second_preemption_while_the_first_is_under_way() -> None:
    """While the victim is still there (terminating, say: here it is put back), the preemptor waits
    for it on its node instead of preempting again."""
    c = await started(m.claim("hc"), prio_pod("high", 1000, "hc"))
    before = {p["metadata"]["name"]: p for p in c.backend.list_objects("Pod")}
    claims = {cl["metadata"]["name"]: cl for cl in c.backend.list_objects("ResourceClaim")}
    await c.filter("high")
    [victim] = set(before) - c.pods()
    for obj in (before[victim], claims[f"lc{victim.split('-')[1]}"]):
        obj["metadata"].pop("resourceVersion", None)
        c.add(obj)
    second = await c.filter("high")
    [reason] = [r for r in second.failed.values() if r.startswith(WAITING_FOR_VICTIMS)]
    assert reason == f"{WAITING_FOR_VICTIMS} (1 of them still there)"
    assert c.backend.faults.calls["evict_pod"] == 1 and c.service.preemption.stats.preemptions == {"started": 1}


async def test_an_eviction_that_fails_holds_nothing_and_is_tried_again() -> None:
    c = await started(m.claim("hc"), prio_pod("high", 1000, "hc"))
    c.backend.faults.fail("evict_pod", ApiUnavailable("injected"))
    first = await c.filter("high")
    assert first.error.endswith("no victim could be evicted") and not c.service.cluster.nominations
    assert len(c.pods()) == 5
    second = await c.filter("high")
    assert any(r.startswith(WAITING_FOR_VICTIMS) for r in second.failed.values()) and len(c.pods()) == 4


async def test_equal_priority_pods_never_preempt_each_other() -> None:
    c = await started(m.claim("hc"), prio_pod("same", 100, "hc"))
    outcome = await c.filter("same")
    assert outcome.node_names == [] and not any(r.startswith(WAITING_FOR_VICTIMS) for r in outcome.failed.values())
    assert len(c.pods()) == 5 and not c.backend.events


async def test_preemption_policy_never_evicts_nobody() -> None:
    c = await started(m.claim("hc"), prio_pod("polite", 1000, "hc", preemptionPolicy="Never"))
    await c.filter("polite")
    assert len(c.pods()) == 5


async def test_preemption_switched_off_evicts_nobody() -> None:
    c = await started(m.claim("hc"), prio_pod("high", 1000, "hc"), preemption=False)
    outcome = await c.filter("high")
    assert outcome.node_names == [] and len(c.pods()) == 5


def budget(name: str, app: str, allowed: int) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": app}}, "maxUnavailable": allowed},
        "status": {"disruptionsAllowed": allowed},
    }


async def test_a_budget_that_forbids_the_eviction_makes_it_choose_another_victim() -> None:
    """Every low pod but low-4 is protected: whichever the plan picks first, the one evicted in the
    end is low-4."""
    budgets = [budget(f"pdb-{i}", f"low-{i}", 0) for i in (1, 2, 3)]
    c = await started(m.claim("hc"), prio_pod("high", 1000, "hc"), *budgets)
    outcome = await c.filter("high")
    assert any(r.startswith(WAITING_FOR_VICTIMS) for r in outcome.failed.values())
    assert {f"low-{i}" for i in range(1, 5)} - c.pods() == {"low-4"}


async def test_when_every_holder_is_protected_the_pod_waits() -> None:
    budgets = [budget(f"pdb-{i}", f"low-{i}", 0) for i in range(1, 5)]
    c = await started(m.claim("hc"), prio_pod("high", 1000, "hc"), *budgets)
    outcome = await c.filter("high")
    assert outcome.node_names == [] and len(c.pods()) == 6 - 1  # nobody evicted (high + 4 low)
    assert c.service.preemption.stats.preemptions.get("refused") == MAX_REFUSALS + 1  # the first choice and 3 more
    assert not c.service.cluster.nominations


async def test_a_pod_needing_two_devices_evicts_both_holders_on_one_node() -> None:
    c = await started(m.claim("hc", count=2), prio_pod("high", 1000, "hc"))
    outcome = await c.filter("high")
    [node] = [n for n, r in outcome.failed.items() if r.startswith(WAITING_FOR_VICTIMS)]
    gone = {f"low-{i}" for i in range(1, 5)} - c.pods()
    on_node = {"node-1": {"low-1", "low-2"}, "node-2": {"low-3", "low-4"}}[node]
    assert gone == on_node


async def test_the_lowest_priority_holders_go_first() -> None:
    c = Cluster(m.claim("hc"), prio_pod("high", 1000, "hc"))
    low = c.backend.get("Pod", "default", "low-3")
    assert low is not None
    low["spec"]["priority"] = 10
    c.backend.apply(low)
    await c.place_low_pods()
    await c.filter("high")
    assert {f"low-{i}" for i in range(1, 5)} - c.pods() == {"low-3"}


async def test_a_shared_claim_with_a_consumer_that_stays_frees_nothing() -> None:
    """low-1 and a pod of priority 2000 share lc1: evicting low-1 frees no device, so the plan
    takes a pod of node-1 whose claim is its own (or node-2's)."""
    c = await started(m.claim("hc"), prio_pod("high", 1000, "hc"), prio_pod("vip", 2000, "lc1"))
    await c.service.bind("default", "vip", "uid-vip", "node-1")
    await c.filter("high")
    gone = {f"low-{i}" for i in range(1, 5)} - c.pods()
    assert len(gone) == 1 and gone != {"low-1"}


# --- the choice itself ---------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    frees=st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=8),
    need=st.integers(min_value=1, max_value=8),
    seed=st.integers(min_value=0, max_value=1000),
)
def test_the_chosen_victims_fit_and_none_can_be_spared(frees: list[int], need: int, seed: int) -> None:
    """A random instance: each candidate frees some devices, the pod needs ``need``. Whatever is
    chosen fits, and sparing any one chosen victim breaks the fit (irreducible)."""
    rng = random.Random(seed)
    victims = [Victim("ns", f"v{i}", f"u{i}", rng.randint(0, 5)) for i in range(len(frees))]
    freed = {v.uid: n for v, n in zip(victims, frees, strict=True)}

    def fits(removed: frozenset[str]) -> bool:
        return sum(freed[u] for u in removed) >= need

    chosen = choose_victims(fits, victims)
    if sum(frees) < need:
        assert chosen is None
        return
    assert chosen is not None
    uids = frozenset(v.uid for v in chosen)
    assert fits(uids)
    for victim in chosen:
        assert not fits(uids - {victim.uid})
    # most important first
    assert [v.priority for v in chosen] == sorted((v.priority for v in chosen), reverse=True)


async def test_preemption_is_counted_in_the_metrics() -> None:
    from prometheus_client import generate_latest

    from extender.server.metrics import Metrics

    c = await started(m.claim("hc"), prio_pod("high", 1000, "hc"))
    metrics = Metrics(c.service)
    await c.filter("high")
    text = generate_latest(metrics.registry).decode()
    assert 'dra_extender_preemptions_total{outcome="started"} 1.0' in text
    assert "dra_extender_preemption_victims_total 1.0" in text
    assert "dra_extender_nominations 1.0" in text


async def test_explain_names_who_would_have_to_go_and_evicts_nobody() -> None:
    c = await started(m.claim("hc", count=2), prio_pod("high", 1000, "hc"), m.claim("pc"), prio_pod("peer", 100, "pc"))
    raw = c.backend.get("Pod", "default", "high")
    assert raw is not None
    explained = DebugViews(c.service).explain(raw, NODES)
    nodes = explained["preemption"]["nodes"]
    assert [v["pod"] for v in nodes["node-1"]["victims"]] == ["default/low-1", "default/low-2"]
    assert [v["pod"] for v in nodes["node-2"]["victims"]] == ["default/low-3", "default/low-4"]
    assert explained["nodes"][0]["preemption"] == nodes["node-1"]
    # equal priority: nobody would go for "peer"
    peer = c.backend.get("Pod", "default", "peer")
    assert peer is not None
    assert DebugViews(c.service).explain(peer, NODES)["preemption"]["nodes"]["node-1"]["victims"] is None
    assert len(c.pods()) == 6 and not c.backend.events


def partitioned_node(node: str) -> list[dict[str, Any]]:
    """One physical GPU as a counter set of 2 units: the whole device takes both, each half one."""
    pool = {"name": f"{node}-gpu", "generation": 1, "resourceSliceCount": 1}

    def device(name: str, kind: str, units: int) -> dict[str, Any]:
        return {
            "name": name,
            "attributes": {"type": {"string": kind}},
            "consumesCounters": [{"counterSet": "gpu", "counters": {"units": {"value": str(units)}}}],
        }

    return [
        m.node(node),
        {
            "apiVersion": m.V1,
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-gpu"},
            "spec": {
                "driver": "gpu.example.com",
                "nodeName": node,
                "pool": pool,
                "sharedCounters": [{"name": "gpu", "counters": {"units": {"value": "2"}}}],
                "devices": [device("whole", "whole", 2), device("half-0", "half", 1), device("half-1", "half", 1)],
            },
        },
    ]


def kind_claim(name: str, kind: str) -> dict[str, Any]:
    claim = m.claim(name)
    claim["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
        {"cel": {"expression": f'device.attributes["gpu.example.com"].type == "{kind}"'}}
    ]
    return claim


async def test_the_holders_of_both_partitions_go_to_free_the_whole_device() -> None:
    objects = [m.gpu_class(), *partitioned_node("node-1"), kind_claim("h0", "half"), kind_claim("h1", "half")]
    objects += [prio_pod("half-a", 100, "h0"), prio_pod("half-b", 50, "h1")]
    objects += [kind_claim("w", "whole"), prio_pod("big", 1000, "w")]
    backend = EmbeddedBackend(copy.deepcopy(objects))
    service = SchedulingService(backend=backend, hold_seconds=0)
    await service.bind("default", "half-a", "uid-half-a", "node-1")
    await service.bind("default", "half-b", "uid-half-b", "node-1")
    raw = backend.get("Pod", "default", "big")
    assert raw is not None
    explained = DebugViews(service).explain(raw, ["node-1"])
    assert [v["pod"] for v in explained["preemption"]["nodes"]["node-1"]["victims"]] == [
        "default/half-a",
        "default/half-b",
    ]
    outcome = await service.filter_and_recover(raw, ["node-1"])
    assert outcome.failed["node-1"].startswith(WAITING_FOR_VICTIMS)
    assert {p["metadata"]["name"] for p in backend.list_objects("Pod")} == {"big"}
    assert (await service.filter_and_recover(raw, ["node-1"])).node_names == ["node-1"]


async def test_a_partition_holder_of_higher_priority_makes_the_whole_device_unreachable() -> None:
    objects = [m.gpu_class(), *partitioned_node("node-1"), kind_claim("h0", "half"), kind_claim("h1", "half")]
    objects += [prio_pod("half-a", 100, "h0"), prio_pod("half-vip", 5000, "h1")]
    objects += [kind_claim("w", "whole"), prio_pod("big", 1000, "w")]
    backend = EmbeddedBackend(copy.deepcopy(objects))
    service = SchedulingService(backend=backend, hold_seconds=0)
    await service.bind("default", "half-a", "uid-half-a", "node-1")
    await service.bind("default", "half-vip", "uid-half-vip", "node-1")
    raw = backend.get("Pod", "default", "big")
    assert raw is not None
    outcome = await service.filter_and_recover(raw, ["node-1"])
    assert not outcome.failed["node-1"].startswith(WAITING_FOR_VICTIMS)
    assert len(backend.list_objects("Pod")) == 3  # evicting half-a alone would not help: nobody goes
    assert service.preemption.stats.preemptions == {"none": 1}


async def test_a_request_for_one_node_does_not_preempt_when_another_node_fits() -> None:
    """kube-scheduler tries a nominated or hint node alone first, then every node: a pod that fits
    elsewhere evicts nobody for a one-node request."""
    c = await started(m.claim("hc"), prio_pod("high", 1000, "hc"))
    c.backend.delete_pod("default", "low-4")  # node-2 has a free GPU now
    assert (await c.filter("high")).node_names == ["node-2"]  # the full pass offered both nodes
    outcome = await c.filter("high", ["node-1"])  # then a hint or nominated node alone
    assert outcome.node_names == [] and len(c.pods()) == 4 and not c.service.cluster.nominations


async def test_a_one_node_request_answers_error_when_the_other_nodes_cannot_be_decided() -> None:
    """Whether another offered node fits cannot be told (its devices fail the pod: a CEL runtime error,
    say): the one-node request answers that ``Error`` and evicts nobody, as before PostFilter asked
    the attempts (review of issue 25)."""
    c = await started(m.claim("hc"), prio_pod("high", 1000, "hc"))
    c.backend.delete_pod("default", "low-4")  # node-2 has a free GPU now
    assert (await c.filter("high")).node_names == ["node-2"]  # the full pass offered both nodes
    real = c.service.verdicts.verdicts

    def verdicts(claims: Any, candidates: Any) -> Any:
        if list(candidates.names) == ["node-2"]:
            raise PodUnschedulable("injected: a device on node-2 fails the pod's selector")
        return real(claims, candidates)

    c.service.verdicts.verdicts = verdicts  # type: ignore[method-assign]
    outcome = await c.filter("high", ["node-1"])
    assert outcome.error == "injected: a device on node-2 fails the pod's selector"
    assert len(c.pods()) == 4 and not c.service.cluster.nominations


async def test_a_request_for_one_node_preempts_when_it_is_all_the_pod_was_offered() -> None:
    """A pod pinned to node-1 (kube-scheduler's own filters leave only that node): node-2's free
    GPU is no reason to wait."""
    c = await started(m.claim("hc"), prio_pod("high", 1000, "hc"))
    c.backend.delete_pod("default", "low-4")
    outcome = await c.filter("high", ["node-1"])
    assert outcome.failed["node-1"].startswith(WAITING_FOR_VICTIMS)


async def test_a_standing_nomination_survives_a_request_without_its_node() -> None:
    c = await started(m.claim("hc"), prio_pod("high", 1000, "hc"))
    first = await c.filter("high")
    [node] = [n for n, r in first.failed.items() if r.startswith(WAITING_FOR_VICTIMS)]
    other = next(n for n in NODES if n != node)
    await c.filter("high", [other])
    assert "uid-high" in c.service.cluster.nominations.by_uid
    c.add(m.claim("tc"))
    c.add(prio_pod("third", 100, "tc"))
    assert (await c.filter("third", [node])).node_names == []


async def test_a_deleted_preemptor_releases_its_nomination() -> None:
    c = await started(m.claim("hc"), prio_pod("high", 1000, "hc"))
    first = await c.filter("high")
    [node] = [n for n, r in first.failed.items() if r.startswith(WAITING_FOR_VICTIMS)]
    c.backend.delete_pod("default", "high")
    c.add(m.claim("tc"))
    c.add(prio_pod("third", 100, "tc"))
    assert (await c.filter("third", [node])).node_names == [node]
    assert not c.service.cluster.nominations


def test_a_nomination_outlives_its_lifetime_while_a_victim_is_still_there() -> None:
    from extender.state.cache.nominations import Nomination, Nominations

    now = [0.0]
    nominations = Nominations(clock=lambda: now[0])
    victim = Victim("default", "slow", "uid-slow", 100, grace_seconds=600)
    nominations.add(Nomination("default/high", "uid-high", 1000, "node-1", (), (victim,), frozenset(), expires=120.0))
    pods = {
        "default/high": m.pod("high"),
        "default/slow": {"metadata": {"name": "slow", "namespace": "default", "uid": "uid-slow"}},
    }
    now[0] = 500.0
    nominations.expire(pods)
    assert nominations  # the victim checkpoints for 10 minutes: still held
    del pods["default/slow"]
    nominations.expire(pods)
    assert not nominations


async def test_budgets_known_beforehand_spare_the_protected_pods() -> None:
    """A pod needs two GPUs; low-2 and low-4 are protected, so every plan violates a budget. The
    protected victim is evicted first, its refusal comes before anything irreversible: nobody goes."""
    budgets = [budget("pdb-2", "low-2", 0), budget("pdb-4", "low-4", 0)]
    c = await started(m.claim("hc", count=2), prio_pod("high", 1000, "hc"), *budgets)
    outcome = await c.filter("high")
    assert len(c.pods()) == 5 and not c.service.cluster.nominations
    assert not any(r.startswith(WAITING_FOR_VICTIMS) for r in outcome.failed.values())


async def test_an_unforeseen_refusal_halfway_leaves_a_nomination_for_what_went() -> None:
    """A budget the extender cannot see (its watch forbidden, say) refuses the second eviction of a
    two-victim plan: what went stays nominated (waiting only for it), nothing more goes."""
    from extender.core.errors import EvictionRefused

    c = await started(m.claim("hc", count=2), prio_pod("high", 1000, "hc"))
    c.backend.faults.fail("evict_pod", EvictionRefused("budget"), after=1, times=None)
    outcome = await c.filter("high")
    gone = {f"low-{i}" for i in range(1, 5)} - c.pods()
    assert len(gone) == 1
    nomination = c.service.cluster.nominations.by_uid["uid-high"]
    assert {v.name for v in nomination.victims} == gone
    assert any(r.startswith(WAITING_FOR_VICTIMS) for r in outcome.failed.values())


async def test_a_victim_whose_eviction_failed_is_not_waited_for() -> None:
    """A plan of two victims; the second eviction fails outright (not a budget): the nomination
    waits only for the one that went, so it ends (the plan cannot complete) instead of holding the
    freed device for ever."""
    c = await started(m.claim("hc", count=2), prio_pod("high", 1000, "hc"))
    c.backend.faults.fail("evict_pod", ApiUnavailable("injected"), after=1)
    await c.filter("high")
    nomination = c.service.cluster.nominations.by_uid["uid-high"]
    assert len(nomination.victims) == 1 and len(c.pods()) == 4
    await c.filter("high")  # the one victim is gone, the pod does not fit: the plan is stale
    assert "uid-high" not in c.service.cluster.nominations.by_uid and len(c.pods()) == 4


def test_pods_deleted_or_finished_do_not_hold_their_claims() -> None:
    running = prio_pod("running", 1)
    done = prio_pod("done", 1)
    done["status"] = {"phase": "Succeeded"}
    going = prio_pod("going", 1)
    going["metadata"]["deletionTimestamp"] = "2026-12-03T20:00:00Z"
    assert holding_pods([running, done, going]) == {"uid-running"}
