"""``--filter-picks-node``: the filter names the one node prioritize would rank first, for pods with
no soft scheduling preferences of their own, so that kube-scheduler binds without scoring (with one
feasible node it skips its scores and prioritize); every other pod gets the whole answer."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from extender.backends.embedded import EmbeddedBackend
from extender.core.answers import CANNOT_ALLOCATE
from extender.core.scoring import ScoringPolicy
from extender.state.cache.ledger import InFlightLedger
from extender.state.cache.pods import scheduling_preference, tolerates_soft_taint
from extender.state.service import SchedulingService
from tests.manifests import claim, cluster, pod

NODES = ["node-1", "node-2", "node-3"]


def service(objects: list[dict[str, Any]], **options: Any) -> SchedulingService:
    options.setdefault("filter_picks_node", True)
    ledger = InFlightLedger(clock=lambda: 100.0)
    return SchedulingService(backend=EmbeddedBackend(copy.deepcopy(objects)), ledger=ledger, **options)


def pods_of(*names: str, gpus: int = 2, nodes: int = 3, **spec: Any) -> list[dict[str, Any]]:
    """A cluster of ``nodes`` nodes with ``gpus`` GPUs each and one-GPU pods ``names``, whose specs
    get ``spec`` merged in."""
    pods = []
    for name in names:
        manifest = pod(name, f"c-{name}")
        manifest["spec"].update(copy.deepcopy(spec))
        pods.append(manifest)
    return cluster(*(claim(f"c-{n}") for n in names), *pods, nodes=nodes, gpus=gpus)


def holds(svc: SchedulingService) -> dict[str, str]:
    return {e.pod_key: e.node for e in svc.ledger if e.tentative}


def stored_pod(svc: SchedulingService, name: str) -> dict[str, Any]:
    found: dict[str, Any] = svc.store.pods[f"default/{name}"]
    return found


def counted_lookups(svc: SchedulingService) -> list[str]:
    """The service's candidate-list and verdict look-ups from now on, in order, by method name."""
    lookups: list[str] = []
    for method in ("candidates", "verdicts"):
        original = getattr(svc.verdicts, method)

        def counted(*args: Any, _original: Any = original, _method: str = method) -> Any:
            lookups.append(_method)
            return _original(*args)

        setattr(svc.verdicts, method, counted)
    return lookups


def test_the_filter_names_the_node_prioritize_ranks_first_and_holds_it() -> None:
    objects = pods_of("p", "q", "r")
    svc = service(objects)
    outcome = svc.filter(stored_pod(svc, "p"), NODES)
    # the same node a service without the option makes prioritize's one best
    plain = service(objects, filter_picks_node=False)
    scores = plain.prioritize(stored_pod(plain, "p"), NODES)
    assert outcome.node_names == [max(scores, key=lambda s: s[1])[0]] == ["node-1"]
    assert outcome.picked and holds(svc) == {"default/p": "node-1"} and svc.stats.filter_picks == 1
    # binpack: the next pod goes where p's hold is, and the one after to a fresh node
    assert svc.filter(stored_pod(svc, "q"), NODES).node_names == ["node-1"]
    assert svc.filter(stored_pod(svc, "r"), NODES).node_names == ["node-2"]
    assert holds(svc) == {"default/p": "node-1", "default/q": "node-1", "default/r": "node-2"}


def test_the_failed_nodes_keep_their_reasons() -> None:
    svc = service(pods_of("p", "q", "r", gpus=1))
    assert svc.filter(stored_pod(svc, "p"), NODES).node_names == ["node-1"]
    outcome = svc.filter(stored_pod(svc, "q"), NODES)
    assert outcome.node_names == ["node-2"] and outcome.failed == {"node-1": CANNOT_ALLOCATE}


@pytest.mark.parametrize("full_node", [None, "node-1", "node-2"])
def test_the_pick_scores_the_filters_own_verdicts_without_looking_them_up_again(full_node: str | None) -> None:
    """The pick ranks the nodes the filter passed with the verdicts the filter passed them with:
    one look-up of the list and of its verdicts per filter, and the same node as prioritize over
    the filter's answer (a full node left out, or none)."""
    names = ["p", "q", "r", "s"]
    objects = pods_of(*names, gpus=2, nodes=3)
    svc, plain = service(objects), service(objects, filter_picks_node=False)
    for other in (svc, plain):
        if full_node is not None:  # two pods bound there already: the filter fails it
            for name in ("r", "s"):
                asyncio.run(other.bind("default", name, f"uid-{name}", full_node))
    lookups = counted_lookups(svc)
    outcome = svc.filter(stored_pod(svc, "p"), NODES)
    assert outcome.picked and lookups == ["candidates", "verdicts"]
    answer = plain.filter(stored_pod(plain, "p"), NODES)
    assert answer.node_names == [n for n in NODES if n != full_node]
    scores = plain.prioritize(stored_pod(plain, "p"), answer.node_names)
    best = max(scores, key=lambda s: s[1])[0]
    assert outcome.node_names == [best] and holds(svc) == {"default/p": best}


def test_verdicts_that_went_stale_during_the_decision_are_looked_up_again_for_the_pick() -> None:
    """A search that paused answers from a table of its own whose changed nodes are ``stale``: the
    pick then looks the list and the verdicts up again, as prioritize would."""
    svc = service(pods_of("p"))
    decide = svc.attempts.decide

    def paused(pod: Any, node_names: Any) -> Any:
        attempt = decide(pod, node_names)
        attempt.verdicts.stale = frozenset({"node-3"})  # as ``_answered_once`` marks a changed node
        return attempt

    svc.attempts.decide = paused  # type: ignore[method-assign]
    lookups = counted_lookups(svc)
    outcome = svc.filter(stored_pod(svc, "p"), NODES)
    assert outcome.picked and lookups == ["candidates", "verdicts", "candidates", "verdicts"]


def test_the_answers_candidate_list_is_remembered_once_and_handed_back() -> None:
    svc = service(pods_of("p", "q", "r", nodes=3, gpus=1), hold_seconds=0)
    asyncio.run(svc.bind("default", "q", "uid-q", "node-2"))  # node-2 is full for p
    attempt = svc.attempt(stored_pod(svc, "p"), NODES)
    assert attempt.verdicts is not None and attempt.candidates is not None
    answer = attempt.outcome.node_names
    assert answer == ["node-1", "node-3"]
    remember = svc.verdicts.remember_answer
    passed = remember(attempt.verdicts, attempt.candidates, answer)
    assert passed is not None and passed.names == answer
    assert remember(attempt.verdicts, attempt.candidates, answer) is passed  # the same answer again
    assert svc.verdicts.candidates(list(answer)) is passed  # what prioritize over the answer finds
    whole = svc.attempt(stored_pod(svc, "r"), ["node-1", "node-3"])
    assert whole.verdicts is not None and whole.candidates is not None
    assert remember(whole.verdicts, whole.candidates, whole.outcome.node_names) is whole.candidates
    assert remember(attempt.verdicts, attempt.candidates, ["node-1"]) is None  # one node: not prioritized


def test_a_bind_to_the_picked_node_finds_its_hold() -> None:
    svc = service(pods_of("p"))
    (node,) = svc.filter(stored_pod(svc, "p"), NODES).node_names
    asyncio.run(svc.bind("default", "p", "uid-p", node))
    assert svc.stats.holds == {"placed": 1, "kept": 1} and holds(svc) == {}


def test_off_by_default() -> None:
    svc = SchedulingService(backend=EmbeddedBackend(pods_of("p")), ledger=InFlightLedger(clock=lambda: 100.0))
    outcome = svc.filter(stored_pod(svc, "p"), NODES)
    assert outcome.node_names == NODES and not outcome.picked and holds(svc) == {}


def test_with_holds_off_nothing_is_picked() -> None:
    # nothing would keep the next pods off the picked node: every pick would name node-1
    svc = service(pods_of("p", "q", gpus=1), hold_seconds=0)
    assert svc.filter(stored_pod(svc, "p"), NODES).node_names == NODES
    assert svc.filter(stored_pod(svc, "q"), NODES).node_names == NODES and svc.stats.filter_picks == 0


def test_the_shared_outcome_of_the_list_still_names_every_node() -> None:
    svc = service(pods_of("p"))
    assert svc.filter(stored_pod(svc, "p"), NODES).node_names == ["node-1"]
    assert svc.attempt(stored_pod(svc, "p"), NODES).outcome.node_names == NODES  # explain's view


def test_a_node_listed_twice_gets_the_whole_answer() -> None:
    svc = service(pods_of("p"))
    listed = ["node-1", "node-2", "node-1"]
    outcome = svc.filter(stored_pod(svc, "p"), listed)
    assert outcome.node_names == listed and not outcome.error and holds(svc) == {}


def test_a_pod_of_a_pod_group_gets_the_whole_answer() -> None:
    svc = service(pods_of("p", schedulingGroup={"podGroupName": "group"}))
    assert svc.filter(stored_pod(svc, "p"), NODES).node_names == NODES


def test_the_answer_of_a_repeated_list_is_never_a_shared_outcome() -> None:
    # outcomes are shared between pods of a shape while nothing fails anew; a picked one never is
    svc = service(pods_of("p", "q"))
    first = svc.filter(stored_pod(svc, "p"), NODES)
    second = svc.filter(stored_pod(svc, "q"), NODES)
    assert first is not second and second.node_names == ["node-1"]
    assert svc.filter(stored_pod(svc, "p"), NODES).node_names == ["node-1"]  # p's own hold given back


PREFERENCES: dict[str, dict[str, Any]] = {
    "preferred node affinity": {
        "affinity": {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 10,
                        "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
                    }
                ]
            }
        }
    },
    "preferred pod affinity": {
        "affinity": {
            "podAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 5,
                        "podAffinityTerm": {"topologyKey": "zone", "labelSelector": {"matchLabels": {"a": "b"}}},
                    }
                ]
            }
        }
    },
    "preferred pod anti-affinity": {
        "affinity": {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 5,
                        "podAffinityTerm": {"topologyKey": "zone", "labelSelector": {"matchLabels": {"a": "b"}}},
                    }
                ]
            }
        }
    },
    "ScheduleAnyway spreading": {
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}]
    },
}


@pytest.mark.parametrize("preference", sorted(PREFERENCES))
def test_a_pod_with_soft_preferences_gets_every_node_for_kube_schedulers_scores(preference: str) -> None:
    svc = service(pods_of("p", **PREFERENCES[preference]))
    outcome = svc.filter(stored_pod(svc, "p"), NODES)
    assert outcome.node_names == NODES and not outcome.picked and svc.stats.filter_picks == 0


@pytest.mark.parametrize(
    ("kind", "picked"), [("ReplicaSet", False), ("StatefulSet", False), ("ReplicationController", False), ("Job", True)]
)
def test_pods_kube_scheduler_spreads_by_default_are_scored_by_it(kind: str, picked: bool) -> None:
    objects = pods_of("p")
    (manifest,) = [o for o in objects if o["kind"] == "Pod"]
    manifest["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": kind, "name": "owner", "uid": "uid-owner", "controller": True}
    ]
    svc = service(objects)
    assert svc.filter(stored_pod(svc, "p"), NODES).picked is picked


def test_hard_spreading_and_required_affinity_leave_nothing_to_score() -> None:
    spec = {
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]
                }
            }
        },
    }
    svc = service(pods_of("p", **spec))
    assert svc.filter(stored_pod(svc, "p"), NODES).node_names == ["node-1"]


def soft_tainted(objects: list[dict[str, Any]], node: str, key: str = "spot", value: str = "yes") -> None:
    (manifest,) = [o for o in objects if o["kind"] == "Node" and o["metadata"]["name"] == node]
    manifest.setdefault("spec", {})["taints"] = [{"key": key, "value": value, "effect": "PreferNoSchedule"}]


def test_a_best_node_with_a_soft_taint_the_pod_does_not_tolerate_is_left_to_kube_scheduler() -> None:
    objects = pods_of("p")
    soft_tainted(objects, "node-1")
    svc = service(objects)
    outcome = svc.filter(stored_pod(svc, "p"), NODES)
    assert outcome.node_names == NODES and not outcome.picked
    assert holds(svc) == {}  # nothing held for a choice not made


def test_a_tolerated_soft_taint_does_not_stop_the_pick() -> None:
    objects = pods_of("p", tolerations=[{"key": "spot", "operator": "Exists", "effect": "PreferNoSchedule"}])
    soft_tainted(objects, "node-1")
    svc = service(objects)
    assert svc.filter(stored_pod(svc, "p"), NODES).node_names == ["node-1"]


def test_a_soft_taint_elsewhere_does_not_stop_the_pick() -> None:
    # node-1 ranks first and has no taint: kube-scheduler's taint score ranks it first too
    objects = pods_of("p")
    soft_tainted(objects, "node-3")
    svc = service(objects)
    assert svc.filter(stored_pod(svc, "p"), NODES).node_names == ["node-1"]


def test_an_unreadable_scoring_annotation_leaves_the_answer_whole() -> None:
    objects = pods_of("p")
    (manifest,) = [o for o in objects if o["kind"] == "Pod"]
    manifest["metadata"]["annotations"] = {"dra-extender.io/scoring": "nonsense=1"}
    svc = service(objects)
    assert svc.filter(stored_pod(svc, "p"), NODES).node_names == NODES and holds(svc) == {}


def test_a_pod_without_claims_gets_every_node() -> None:
    objects = cluster(pod("plain"), nodes=3)
    svc = service(objects)
    assert svc.filter(stored_pod(svc, "plain"), NODES).node_names == NODES


def test_the_pick_follows_the_scoring_policy() -> None:
    # spread: the emptiest node; node-1 has a GPU taken by a bound claim's allocation
    objects = pods_of("p", "q")
    svc = service(objects, scoring=ScoringPolicy.parse("spread=1"))
    asyncio.run(svc.bind("default", "q", "uid-q", "node-1"))
    assert svc.filter(stored_pod(svc, "p"), NODES).node_names == ["node-2"]


# --- the pod's side, field by field ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "meta", "expected"),
    [
        ({}, {}, ""),
        (PREFERENCES["preferred node affinity"], {}, "preferred nodeAffinity"),
        (PREFERENCES["preferred pod affinity"], {}, "preferred podAffinity"),
        (PREFERENCES["preferred pod anti-affinity"], {}, "preferred podAntiAffinity"),
        (PREFERENCES["ScheduleAnyway spreading"], {}, "a ScheduleAnyway topology spread constraint"),
        ({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}}, {}, ""),
        (
            {},
            {"ownerReferences": [{"kind": "ReplicaSet", "name": "r", "controller": True}]},
            "spread by default as a ReplicaSet's pod",
        ),
        ({}, {"ownerReferences": [{"kind": "ReplicaSet", "name": "r"}]}, ""),  # not its controller
        ({}, {"ownerReferences": [{"kind": "Job", "name": "j", "controller": True}]}, ""),
        # constraints of its own: kube-scheduler's default spreading does not apply
        (
            {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "DoNotSchedule"}]},
            {"ownerReferences": [{"kind": "ReplicaSet", "name": "r", "controller": True}]},
            "",
        ),
    ],
)
def test_scheduling_preference(spec: dict[str, Any], meta: dict[str, Any], expected: str) -> None:
    assert scheduling_preference({"metadata": {"name": "p", **meta}, "spec": spec}) == expected


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        ({"key": "spot", "operator": "Equal", "value": "yes", "effect": "PreferNoSchedule"}, True),
        ({"key": "spot", "value": "yes"}, True),  # no operator: Equal; no effect: every effect
        ({"key": "spot", "value": "no"}, False),
        ({"key": "spot", "operator": "Exists"}, True),
        ({"operator": "Exists"}, True),  # no key with Exists: every taint
        ({"key": "other", "operator": "Exists"}, False),
        ({"key": "spot", "operator": "Exists", "effect": "NoSchedule"}, False),
        ({"key": "spot", "operator": "Lt", "value": "5"}, False),  # an operator not known here
    ],
)
def test_tolerates_soft_taint(toleration: dict[str, Any], tolerated: bool) -> None:
    pod_ = {"metadata": {"name": "p"}, "spec": {"tolerations": [toleration]}}
    assert tolerates_soft_taint(pod_, "spot", "yes") is tolerated


def test_a_pod_without_tolerations_tolerates_no_soft_taint() -> None:
    assert tolerates_soft_taint({"metadata": {"name": "p"}, "spec": {}}, "spot", "yes") is False


def test_a_pod_asking_for_an_extended_resource_is_picked_for_and_bound_there() -> None:
    # KEP-5004: the pod's claim is made at bind; the pick scores and holds its devices as prioritize does
    from tests.state.test_extended_resources import UID, extended_claims, extended_pod, objects

    backend = EmbeddedBackend(copy.deepcopy(objects(extended_pod(gpus=1))))
    svc = SchedulingService(backend=backend, ledger=InFlightLedger(clock=lambda: 100.0), filter_picks_node=True)
    (node,) = svc.filter(extended_pod(gpus=1), ["node-1", "node-2"]).node_names
    assert holds(svc) == {"default/p": node} and svc.stats.filter_picks == 1
    asyncio.run(svc.bind("default", "p", UID, node))
    [made] = extended_claims(backend)
    assert {r["pool"] for r in made["status"]["allocation"]["devices"]["results"]} == {node}
    assert svc.stats.holds == {"placed": 1, "kept": 1}
