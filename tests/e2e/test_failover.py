"""Leader fail-over with two replicas of the Deployment (docs/configuration.md#leadership).

Two pairs (extender + kube-scheduler, leader election on the Lease ``dra-extender/dra-extender-scheduler``,
short lease timings from the harness) run; the leader pair is killed (SIGKILL: a crash) while pods are
being scheduled; the standby's kube-scheduler takes the Lease and binds the rest through its own
extender. What the test proves:

- while standby, the standby's extender did nothing: no extender verb reached it and it sent no write
  (its JSON log has no verb, bind, preemption, requeue or claim event; its /metrics count no request
  and no allocation). Every pair runs on this one host, so both extenders take the Lease holder
  ``<hostname>_<uuid>`` for their own scheduler's: what keeps a standby silent here is that its
  scheduler, not being leader, never calls it (a stray request to a standby extender is refused only
  where replicas have their own hostnames, as pods do: tests/backends/kube/test_leadership.py);
- after the crash the Lease has a new holder, and the pods created afterwards are bound by the former
  standby (its extender logs their binds);
- no double allocation across the crash: every device is in at most one claim's allocation, every
  claim's ``reservedFor`` names existing pods bound to the allocation's node, every bound pod's claims
  are allocated and reserved for it, and a pod for which no device is left stays pending.

The session's replica is left running and leading afterwards (the survivor stands in for it when it
was the one killed: ``Deployment.stand_in``), since other tests share it.
"""

from __future__ import annotations

import urllib.request
from collections import Counter
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.controlplane.api import eventually
from tests.e2e.harness import Deployment, Extender, Pair, Scenario

#: Log events that only a replica doing work (answering verbs, writing) emits.
WORK_EVENTS = ("filter.", "prioritize.", "bind.", "preempt", "requeue.", "claim.", "classic", "request.")


def _work(extender: Extender) -> list[dict[str, Any]]:
    return [
        e
        for e in extender.events()
        if "verb" in e or "request_id" in e or str(e.get("event", "")).startswith(WORK_EVENTS)
    ]


def _bound_by(extender: Extender) -> set[str]:
    """The pods this extender bound (``namespace/name``), by its log."""
    return {e["pod"] for e in extender.events() if e.get("event") == "bind.finished" and e.get("outcome") == "bound"}


def _metrics(extender: Extender) -> dict[str, float]:
    """Every sample of /metrics by ``name{labels}``."""
    with urllib.request.urlopen(extender.url + "/metrics", timeout=30) as answer:
        text = answer.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            out[f"{sample.name}{{{labels}}}"] = sample.value
    return out


def _work_counted(extender: Extender) -> dict[str, float]:
    """The /metrics samples that count verb requests, binds, allocations and evictions (non-zero only)."""
    wanted = (
        "dra_extender_request_duration_seconds_count",
        "dra_extender_binds_total",
        "dra_extender_allocations_total",
        "dra_extender_filter_nodes_total",
        "dra_extender_preemptions_total",
        "dra_extender_preemption_victims_total",
    )
    verbs = ("verb=filter}", "verb=prioritize}", "verb=bind}", "verb=preempt}")
    return {
        k: v
        for k, v in _metrics(extender).items()
        if k.startswith(wanted) and v and (not k.startswith(wanted[0]) or k.endswith(verbs))
    }


def _consistent(scenario: Scenario) -> tuple[int, int]:
    """No device twice, reservations matching bindings: (bound pods, allocated claims)."""
    pods = {p["metadata"]["name"]: p for p in scenario.admin.items(f"/api/v1/namespaces/{scenario.namespace}/pods")}
    claims = scenario.claims()
    devices: Counter[tuple[str, str, str]] = Counter()
    allocated = 0
    for claim in claims:
        name = claim["metadata"]["name"]
        status = claim.get("status") or {}
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
        devices.update((r["driver"], r["pool"], r["device"]) for r in results)
        allocated += bool(results)
        for consumer in status.get("reservedFor") or []:
            pod = pods.get(consumer["name"])
            assert pod is not None and pod["metadata"]["uid"] == consumer["uid"], f"{name} reserved for a gone pod"
            assert {r["pool"] for r in results} == {pod["spec"].get("nodeName")}, (
                f"{name}: devices not on its pod's node"
            )
        if results:
            assert status.get("reservedFor"), f"{name} allocated for nobody"
    assert not [d for d, n in devices.items() if n > 1], f"devices in two claims: {devices}"
    by_name = {c["metadata"]["name"]: c for c in claims}
    bound = 0
    for name, pod in pods.items():
        if not pod["spec"].get("nodeName"):
            continue
        bound += 1
        for entry in pod["status"].get("resourceClaimStatuses") or []:
            claim = by_name[entry["resourceClaimName"]]
            assert {"resource": "pods", "name": name, "uid": pod["metadata"]["uid"]} in claim["status"]["reservedFor"]
    return bound, allocated


def _restore(deployment: Deployment, replica: Pair, started: list[Pair]) -> None:
    """The session's replica running and leading again, and no other pair: when it was the one
    killed, the survivor stands in for it; else the pairs this test started are stopped."""
    survivors = [p for p in started if p in deployment.pairs]
    if replica not in deployment.pairs:
        if survivors:
            deployment.stand_in(replica, survivors.pop())
        else:
            deployment.stand_in(replica, deployment.start_pair())
    for pair in survivors:
        deployment.stop_pair(pair)
    eventually(lambda: deployment.leading_pair() is replica, what="the session's replica leading")


def test_the_standby_takes_over_after_the_leader_crashes_without_writing_before_or_allocating_twice(
    scenario: Scenario, deployment: Deployment, replica: Pair
) -> None:
    started = [deployment.start_pair()]
    try:
        leader = eventually(deployment.leading_pair, what="one pair holding the Lease")
        (standby,) = [p for p in deployment.pairs if p is not leader]
        holder = deployment.leader()

        nodes = scenario.nodes(2)
        gpu = scenario.device_class()
        for node in nodes:
            scenario.gpus(node, 4)
        scenario.template("one-gpu", gpu)
        for i in range(6):
            scenario.pod(f"before-{i}", templates=["one-gpu"])
        eventually(lambda: scenario.get_pod("before-0")["spec"].get("nodeName"), what="a first pod bound")

        # the standby so far: no request, no write
        work, counted = _work(standby.extender), _work_counted(standby.extender)
        assert deployment.leading_pair() is leader, "the leader lost its Lease on its own"
        assert not work, f"the standby extender worked: {work[:3]}"
        assert not counted, f"the standby extender counted work: {counted}"

        deployment.stop_pair(leader, kill=True)
        new_holder = eventually(lambda: (h := deployment.leader()) != holder and h, what="a new Lease holder")
        assert eventually(deployment.leading_pair, what="the standby leading") is standby

        for i in range(3):  # 9 pods, 8 devices
            scenario.pod(f"after-{i}", templates=["one-gpu"])
        names = [f"before-{i}" for i in range(6)] + [f"after-{i}" for i in range(3)]

        def settled() -> list[str] | None:
            unbound = [n for n in names if not scenario.get_pod(n)["spec"].get("nodeName")]
            return unbound if len(unbound) == 1 and scenario.events_for(unbound[0], "FailedScheduling") else None

        (left,) = eventually(settled, what="8 pods bound, the 9th refused")
        assert _consistent(scenario) == (8, 8)
        after = {f"{scenario.namespace}/after-{i}" for i in range(3)} - {f"{scenario.namespace}/{left}"}
        eventually(lambda: after <= _bound_by(standby.extender), what="the standby's extender logging their binds")
        assert deployment.leader() == new_holder
    finally:
        _restore(deployment, replica, started)

    # the session's replica schedules: a device freed, the pod left pending gets it
    scenario.admin.delete(f"/api/v1/namespaces/{scenario.namespace}/pods/before-0", grace_seconds=0)
    scenario.bound(left)
    assert _consistent(scenario) == (8, 8)
    eventually(
        lambda: f"{scenario.namespace}/{left}" in _bound_by(replica.extender), what="the session's replica binding it"
    )
