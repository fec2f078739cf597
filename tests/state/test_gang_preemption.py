"""Preemption for a whole gang (issue 27, spec/workloads-and-gangs.md §7.8): a gang that fits only
if lower-priority pods go evicts an irreducible set of them for all its members, or nobody; the
freed devices are nominated for the members and nothing of lower priority takes them."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.backends.embedded import EmbeddedBackend
from extender.core.errors import ApiUnavailable, EvictionRefused
from extender.core.preemption import Victim, VictimUnit, choose_units
from extender.state.cache.nominations import Nomination, Nominations
from extender.state.preemption.devices import WAITING_FOR_VICTIMS
from extender.state.service import SchedulingService
from tests import manifests as m

NODES = ["node-1", "node-2"]
GANG_PRIORITY = 1000


def prio_pod(name: str, priority: int, *claims: str, group: str = "", **spec: Any) -> dict[str, Any]:
    pod = m.pod(name, *claims)
    pod["spec"]["priority"] = priority
    pod["spec"].update(spec)
    pod["metadata"]["labels"] = {"app": name}
    if group:
        pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    return pod


def pod_group(name: str, min_count: int | None, *, disruption: str = "") -> dict[str, Any]:
    policy = {"gang": {"minCount": min_count}} if min_count is not None else {"basic": {}}
    spec: dict[str, Any] = {"schedulingPolicy": policy}
    if disruption:
        spec["disruptionMode"] = disruption
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": spec,
    }


def gang(size: int, gpus_each: int, **spec: Any) -> list[dict[str, Any]]:
    """PodGroup ``pg`` of ``size`` members ``m0``… (priority 1000), each claiming ``gpus_each``."""
    return [
        pod_group("pg", size),
        *(m.claim(f"gc{i}", gpus_each) for i in range(size)),
        *(prio_pod(f"m{i}", GANG_PRIORITY, f"gc{i}", group="pg", **spec) for i in range(size)),
    ]


class Cluster:
    """Two nodes of two GPUs; ``holders`` maps a pod name to (priority, node): each holds one GPU."""

    def __init__(self, holders: dict[str, tuple[int, str]], *extra: dict[str, Any], **options: Any) -> None:
        self.holders = holders
        objects = m.cluster(*(m.claim(f"{name}-gpu") for name in holders), *extra)
        objects += [prio_pod(name, priority, f"{name}-gpu") for name, (priority, _) in holders.items()]
        self.backend = EmbeddedBackend(copy.deepcopy(objects))
        self.service = SchedulingService(backend=self.backend, hold_seconds=0, gang_retry_backoff=0, **options)

    async def start(self) -> Cluster:
        for name, (_, node) in self.holders.items():
            await self.service.bind("default", name, f"uid-{name}", node)
        return self

    async def filter(self, name: str, nodes: list[str] = NODES) -> Any:
        raw = self.backend.get("Pod", "default", name)
        assert raw is not None
        return await self.service.filter_and_recover(raw, nodes)

    async def bind(self, name: str, node: str) -> None:
        await self.service.bind("default", name, f"uid-{name}", node)

    def pods(self) -> set[str]:
        return {p["metadata"]["name"] for p in self.backend.list_objects("Pod")}

    def evicted(self) -> set[str]:
        return set(self.holders) - self.pods()


def full(priorities: tuple[int, int, int, int] = (100, 100, 100, 100)) -> dict[str, tuple[int, str]]:
    """Every GPU held: ``low-1``, ``low-2`` on node 1, ``low-3``, ``low-4`` on node 2."""
    nodes = ["node-1", "node-1", "node-2", "node-2"]
    return {f"low-{i + 1}": (priorities[i], nodes[i]) for i in range(4)}


def group_victims(c: Cluster, *names: str) -> None:
    """Put the holders ``names`` into PodGroup ``victims`` (before they are bound)."""
    for name in names:
        raw = c.backend.get("Pod", "default", name)
        assert raw is not None
        raw["spec"]["schedulingGroup"] = {"podGroupName": "victims"}
        raw["metadata"].pop("resourceVersion", None)
        c.backend.apply(raw)


def waiting(outcome: Any) -> bool:
    return outcome.node_names == [] and all(r.startswith(WAITING_FOR_VICTIMS) for r in outcome.failed.values())


async def test_a_gang_that_fits_only_without_lower_priority_pods_evicts_them_and_is_placed_whole() -> None:
    c = await Cluster(full(), *gang(2, 2)).start()
    first = await c.filter("m0")
    assert waiting(first) and first.failed["node-1"].endswith("for gang default/pg (4 being evicted)")
    assert c.evicted() == {"low-1", "low-2", "low-3", "low-4"}
    nominations = c.service.cluster.nominations.of_group("default/pg")
    assert sorted(n.pod_key for n in nominations) == ["default/m0", "default/m1"]
    assert {n.node for n in nominations} == set(NODES)
    nominated = {n: c.backend.get("Pod", "default", n)["status"].get("nominatedNodeName") for n in ("m0", "m1")}  # type: ignore[index]
    assert sorted(nominated.values()) == NODES
    events = {(pod, reason) for pod, _, reason, _ in c.backend.events}
    assert {("default/m0", "Preempting"), ("default/m1", "Preempting"), ("default/low-1", "Preempted")} <= events
    # the victims are gone and their claims deallocated: the next pass places the gang on its nodes
    answers = {name: await c.filter(name) for name in ("m0", "m1")}
    placed = {name: outcome.node_names for name, outcome in answers.items()}
    assert placed == {name: [node] for name, node in nominated.items()}
    await asyncio.gather(*(c.bind(name, node) for name, node in nominated.items()))
    assert not c.service.cluster.nominations
    assert c.service.preemption.stats.preemptions == {"started": 1}
    assert c.service.preemption.stats.victims == 4


async def test_only_an_irreducible_set_goes_and_the_least_important_first() -> None:
    """Each member needs one GPU: two victims are enough, the two of lowest priority."""
    c = await Cluster(full((100, 50, 200, 60)), *gang(2, 1)).start()
    assert waiting(await c.filter("m1"))
    assert c.evicted() == {"low-2", "low-4"}


async def test_nothing_is_evicted_when_the_gang_would_still_not_fit_all_or_nothing() -> None:
    """Each member needs a whole node; node 2's holders outrank the gang. Evicting node 1's pods
    would place one member: a partial gang's worth, so nobody goes."""
    c = await Cluster(full((100, 100, 2000, 2000)), *gang(2, 2)).start()
    outcome = await c.filter("m0")
    assert outcome.node_names == [] and not waiting(outcome)
    assert outcome.failed["node-1"].startswith("gang default/pg: 0 of 2 waiting members fit together")
    assert c.evicted() == set() and not c.service.cluster.nominations
    assert c.service.preemption.stats.preemptions == {"none": 1}


async def test_pods_of_equal_priority_are_never_victims() -> None:
    c = await Cluster(full((GANG_PRIORITY,) * 4), *gang(2, 1)).start()
    assert not waiting(await c.filter("m0")) and c.evicted() == set()


async def test_a_member_that_never_preempts_keeps_the_whole_gang_from_preempting() -> None:
    objects = gang(2, 1)
    objects[-1]["spec"]["preemptionPolicy"] = "Never"
    c = await Cluster(full(), *objects).start()
    assert not waiting(await c.filter("m0")) and c.evicted() == set()


async def test_preemption_switched_off_evicts_nobody_for_a_gang() -> None:
    c = await Cluster(full(), *gang(2, 1), preemption=False).start()
    assert not waiting(await c.filter("m0")) and c.evicted() == set()


@pytest.mark.parametrize(("mode", "evicted"), [("PodGroup", {"low-1", "low-3"}), ("Pod", {"low-1"})])
async def test_a_pod_group_that_is_disrupted_as_a_whole_goes_whole(mode: str, evicted: set[str]) -> None:
    """``low-1`` (node 1) and ``low-3`` (node 2) form PodGroup ``victims``; the gang needs one GPU.
    The least important go first, as kube-scheduler's reprieve spares the most important: with
    disruptionMode PodGroup, evicting ``low-1`` means evicting ``low-3`` as well."""
    c = Cluster(full((100, 500, 100, 2000)), *gang(1, 1), pod_group("victims", None, disruption=mode))
    group_victims(c, "low-1", "low-3")
    await c.start()
    assert waiting(await c.filter("m0", ["node-1"]))
    assert c.evicted() == evicted


async def test_a_pod_group_that_goes_whole_is_no_victim_if_one_of_its_pods_outranks_the_gang() -> None:
    c = Cluster(full((100, 100, 2000, 2000)), *gang(1, 1), pod_group("victims", None, disruption="PodGroup"))
    group_victims(c, "low-1", "low-2", "low-3")
    await c.start()
    outcome = await c.filter("m0")
    assert not waiting(outcome) and c.evicted() == set()


async def test_a_budget_protected_victim_is_spared_when_another_will_do() -> None:
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep-low-1", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "low-1"}}},
        "status": {"disruptionsAllowed": 0},
    }
    c = await Cluster(full((50, 90, 100, 100)), *gang(1, 1), budget).start()
    assert waiting(await c.filter("m0"))
    assert c.evicted() == {"low-2"}


async def test_an_eviction_refused_halfway_chooses_again_without_that_unit() -> None:
    c = await Cluster(full((50, 60, 100, 100)), *gang(1, 1)).start()
    c.backend.faults.fail("evict_pod", EvictionRefused("disruption budget"))
    assert waiting(await c.filter("m0"))
    assert c.evicted() == {"low-2"}
    assert c.service.preemption.stats.preemptions == {"refused": 1, "started": 1}


async def test_a_choice_out_of_time_evicts_nobody() -> None:
    c = await Cluster(full(), *gang(2, 1)).start()
    c.service.gang_preemption.choice_seconds = 0
    assert not waiting(await c.filter("m0")) and c.evicted() == set()
    assert c.service.preemption.stats.preemptions == {"budget": 1}


async def test_kube_schedulers_one_node_try_of_a_nominated_node_does_not_preempt() -> None:
    c = await Cluster(full(), *gang(2, 2)).start()
    raw = c.backend.get("Pod", "default", "m0")
    assert raw is not None
    raw.setdefault("status", {})["nominatedNodeName"] = "node-1"
    raw["metadata"].pop("resourceVersion", None)
    c.backend.apply(raw)
    assert not waiting(await c.filter("m0", ["node-1"])) and c.evicted() == set()
    assert waiting(await c.filter("m0")) and len(c.evicted()) == 4


async def test_the_gangs_nominations_keep_lower_priority_pods_off_the_freed_devices() -> None:
    c = await Cluster(full(), *gang(2, 2), m.claim("tc"), prio_pod("third", 100, "tc")).start()
    await c.filter("m0")
    third = await c.filter("third")
    assert third.node_names == []
    assert all("nominated for preemptor default/m" in reason for reason in third.failed.values())


async def test_while_victims_go_every_member_waits_and_nobody_more_is_evicted() -> None:
    c = await Cluster(full(), *gang(2, 2)).start()
    await c.filter("m0")
    before = c.backend.faults.calls["evict_pod"]
    # the victims are back (say they are terminating): every member waits for them
    for name in sorted(c.evicted()):
        c.backend.apply(prio_pod(name, 100, f"{name}-gpu"))
    outcome = await c.filter("m1")
    assert waiting(outcome) and "(4 of them still there)" in outcome.failed["node-1"]
    assert c.backend.faults.calls["evict_pod"] == before


async def test_a_member_answered_from_a_pass_planned_before_the_devices_came_free_ends_that_pass() -> None:
    """kube-scheduler's pass goes on to the next member after the first preempted: its pass was
    planned with the victims still there, so that member is told the next pass places the gang
    (the nominations stay), and the next pass does."""
    c = await Cluster(full(), *gang(2, 2)).start()
    assert waiting(await c.filter("m0"))
    second = await c.filter("m1")
    assert second.node_names == [] and second.failed["node-1"].endswith("the next pass places the gang")
    assert len(c.service.cluster.nominations.of_group("default/pg")) == 2
    assert [len((await c.filter(name)).node_names) for name in ("m1", "m0")] == [1, 1]


def victim(uid: str, priority: int) -> Victim:
    return Victim("default", uid, uid, priority, claims=(f"{uid}-gpu",))


@settings(max_examples=200, deadline=None)
@given(
    frees=st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=8),
    groups=st.lists(st.integers(min_value=0, max_value=3), min_size=8, max_size=8),
    need=st.integers(min_value=1, max_value=10),
)
def test_the_chosen_units_fit_and_none_can_be_spared(frees: list[int], groups: list[int], need: int) -> None:
    """Pods free ``frees[i]`` devices each; pods with equal ``groups[i]`` > 0 form one unit."""
    pods = [victim(f"p{i}", i) for i in range(len(frees))]
    by_group: dict[int, list[Victim]] = {}
    units = []
    for i, pod in enumerate(pods):
        if groups[i]:
            by_group.setdefault(groups[i], []).append(pod)
        else:
            units.append(VictimUnit((pod,)))
    units += [VictimUnit(tuple(members), group=f"g{g}") for g, members in by_group.items()]
    freed = {p.uid: frees[i] for i, p in enumerate(pods)}

    def fits(removed: frozenset[str]) -> bool:
        return sum(freed[uid] for uid in removed) >= need

    chosen = choose_units(fits, units)
    everything = frozenset(freed)
    if not fits(everything) or fits(frozenset()):
        assert chosen is None
        return
    assert chosen is not None
    uids = frozenset(uid for unit in chosen for uid in unit.uids)
    assert fits(uids)
    for unit in chosen:
        assert not fits(uids - unit.uids)


def fabric(gpus_each: int) -> list[dict[str, Any]]:
    """A fabric device every node reaches, claimed by PodGroup ``pg`` for all its members."""
    fabric_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "fabric"},
        "spec": {"selectors": [{"cel": {"expression": 'device.driver == "fabric.example.com"'}}]},
    }
    fabric_slice = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "fabric"},
        "spec": {
            "driver": "fabric.example.com",
            "pool": {"name": "fabric", "generation": 1, "resourceSliceCount": 1},
            "allNodes": True,
            "devices": [{"name": "domain"}],
        },
    }
    objects = gang(2, gpus_each)
    objects[0]["spec"]["resourceClaims"] = [{"name": "domain", "resourceClaimName": "pg-domain"}]
    for member in objects[3:]:
        member["spec"]["resourceClaims"].append({"name": "domain", "resourceClaimName": "pg-domain"})
    return [fabric_class, fabric_slice, m.claim("pg-domain", 1, cls="fabric"), *objects]


async def test_members_nominations_are_one_plan_the_pod_group_claim_binds_with_any_member_first() -> None:
    """The PodGroup's claim is nominated with one member; the other member's bind on the same node,
    coming first, allocates it: the nominations of one gang are never held against each other."""
    c = await Cluster(full((100, 100, 2000, 2000)), *fabric(1)).start()
    assert waiting(await c.filter("m0"))
    nominations = {n.pod_key.partition("/")[2]: n for n in c.service.cluster.nominations.of_group("default/pg")}
    [with_claim] = [name for name, n in nominations.items() if len(n.results) == 2]
    [other] = set(nominations) - {with_claim}
    for name in ("m0", "m1"):  # kube-scheduler's next pass
        assert (await c.filter(name)).node_names == [nominations[name].node]
    # kube-scheduler sends a pass's binds together; the one without the claim's nomination first
    first = asyncio.create_task(c.bind(other, nominations[other].node))
    await c.bind(with_claim, nominations[with_claim].node)
    await first
    shared = c.backend.get("ResourceClaim", "default", "pg-domain")
    assert shared is not None and shared["status"]["reservedFor"][0]["resource"] == "podgroups"
    assert not c.service.cluster.nominations


def test_the_nominations_of_one_gang_are_not_held_against_its_members_but_against_others() -> None:
    nominations = Nominations(clock=lambda: 0.0)
    for member in ("m0", "m1"):
        nominations.add(
            Nomination(
                f"default/{member}", f"uid-{member}", 1000, "node-1", (), (), frozenset(), 60.0, group="default/pg"
            )
        )
    nominations.add(Nomination("default/solo", "uid-solo", 1000, "node-1", (), (), frozenset(), 60.0))
    assert [n.pod_key for n in nominations.held_against("uid-m0", 1000)] == ["default/solo"]
    assert len(nominations.held_against("uid-other", 1000)) == 3
    assert len(nominations.held_against("uid-solo", 1000)) == 2


def keep_budget(name: str, apps: list[str], allowed: int) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": apps}]}},
        "status": {"disruptionsAllowed": allowed},
    }


async def test_a_budget_that_would_refuse_one_of_the_needed_victims_means_nobody_is_evicted() -> None:
    """The gang needs all four GPUs; a budget over low-1 and low-2 allows one disruption. Evicting
    low-2 first and being refused low-1 would evict for a gang that then does not fit."""
    c = await Cluster(full(), *gang(2, 2), keep_budget("keep", ["low-1", "low-2"], 1)).start()
    outcome = await c.filter("m0")
    assert not waiting(outcome) and c.evicted() == set() and not c.service.cluster.nominations
    assert c.backend.faults.calls["evict_pod"] == 0


@pytest.mark.parametrize("error", [EvictionRefused("a budget nobody saw"), ApiUnavailable("injected")])
async def test_an_eviction_failing_halfway_stops_the_rest_and_holds_nothing_without_a_plan(error: Exception) -> None:
    c = await Cluster(full(), *gang(2, 2)).start()
    c.backend.faults.fail("evict_pod", error, after=1)  # the first eviction goes through
    outcome = await c.filter("m0")
    assert not waiting(outcome) and len(c.evicted()) == 1
    assert c.backend.faults.calls["evict_pod"] == 2  # none tried after the failure
    assert not c.service.cluster.nominations  # no complete plan without the failed unit
    assert c.service.preemption.stats.preemptions == {"refused": 1}


async def test_a_pass_replaced_while_the_choice_runs_evicts_nobody() -> None:
    """Another member's filter replaced the pass the preemption began with (kube-scheduler retried
    after a timeout, say): what was decided on the old pass is not acted on."""
    c = await Cluster(full(), *gang(2, 2)).start()
    gang_filter = c.service.gang_filter
    original = gang_filter._pace

    def ending_pace() -> Any:
        step = original()

        def paced() -> object:
            if c.service.gang_preemption._running:
                gang_filter.end_pass("default/pg")  # a member's filter starts a new pass meanwhile
            return step()

        return paced

    gang_filter._pace = ending_pace
    outcome = await c.filter("m0")
    assert not waiting(outcome) and c.evicted() == set() and not c.service.cluster.nominations


async def test_with_many_units_the_reprieve_starts_from_those_near_a_plan() -> None:
    c = await Cluster(full((100, 50, 200, 60)), *gang(2, 1)).start()
    c.service.gang_preemption.reprieve_all = 2  # 4 units: more than that
    assert waiting(await c.filter("m1"))
    assert len(c.evicted()) == 2  # still irreducible: one GPU per member


async def test_devices_of_victims_not_yet_deallocated_answer_error_and_a_claim_taken_since_does_not() -> None:
    c = await Cluster(full(), *gang(2, 2)).start()
    await c.filter("m0")
    # the resourceclaim controller has not deallocated low-1's claim yet
    claim = copy.deepcopy(c.backend.get("ResourceClaim", "default", "low-1-gpu"))
    assert claim is not None
    claim["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpus", "driver": "gpu.example.com", "pool": "node-1", "device": "gpu-0"}]
            }
        }
    }
    claim["metadata"].pop("resourceVersion", None)
    c.backend.apply(claim)
    outcome = await c.filter("m1")
    assert outcome.error == "waiting for devices of preempted pods to be deallocated for gang default/pg"
    # a running pod took that claim since: it is not coming back, the gang is planned without it
    c.backend.apply(prio_pod("taker", 100, "low-1-gpu"))
    await c.bind("taker", "node-1")
    outcome = await c.filter("m1")
    assert not outcome.error and not waiting(outcome)


async def test_a_pod_group_that_goes_whole_is_finished_when_one_of_its_evictions_fails() -> None:
    """The victim unit is PodGroup ``victims`` (low-1 and low-3, disruptionMode PodGroup). The
    first eviction fails: the other pod of the group is evicted all the same, and the next round
    takes the one left, so the group is not left half-evicted."""
    c = Cluster(full((100, 500, 100, 2000)), *gang(1, 1), pod_group("victims", None, disruption="PodGroup"))
    group_victims(c, "low-1", "low-3")
    await c.start()
    c.backend.faults.fail("evict_pod", ApiUnavailable("injected"))
    assert waiting(await c.filter("m0", ["node-1"]))
    assert c.evicted() == {"low-1", "low-3"}
