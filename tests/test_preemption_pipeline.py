"""Device-aware preemption under the kube-scheduler model (bench/scheduler_model.py, issue 15 with
issue 11's pipeline): every GPU of the cluster is held by running pods of priority 100; pods of
priority 1000 arrive, each needing one GPU. Through the model's queues (FailedNodes parks a pod
until a pod event, Error backs off), on the embedded backend and on the kube backend over the
strict fake API server (the Eviction API, the fake controller-manager deallocating a victim's claim
only once the victim is gone): every preemptor is bound, exactly one victim per preemptor is
evicted, and no preemptor's devices went to anyone else. Counts, never timings."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

import pytest

from bench.pipeline import PATIENT_SERVICE_OPTIONS, embedded_stack, kube_stack, run_model
from bench.scheduler_model import ModelSettings
from tests import manifests as m
from tests.fakes.claim_controller import ReservationController

SETTINGS = ModelSettings(tie_break="worst", in_tree="none", binds_in_flight=16, time_limit=120)
NODES, GPUS, PREEMPTORS = 3, 2, 4


def allocated(name: str, node: str, device: str, pod: str) -> dict[str, Any]:
    claim = m.claim(name)
    claim["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    claim["status"] = {
        "allocation": {
            "devices": {"results": [{"request": "gpu", "driver": "gpu.example.com", "pool": node, "device": device}]},
            "nodeSelector": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
            },
        },
        "reservedFor": [{"resource": "pods", "name": pod, "uid": f"uid-{pod}"}],
    }
    return claim


def workload() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the cluster, the preemptors the model schedules)."""
    objects = m.cluster(nodes=NODES, gpus=GPUS)
    for n in range(1, NODES + 1):
        for g in range(GPUS):
            name = f"low-{n}-{g}"
            objects.append(allocated(f"{name}-gpu", f"node-{n}", f"gpu-{g}", name))
            pod = m.pod(name, f"{name}-gpu")
            pod["spec"].update(nodeName=f"node-{n}", priority=100)
            pod["status"] = {"phase": "Running", "startTime": f"2026-12-01T10:{n}{g}:00Z"}
            objects.append(pod)
    preemptors = []
    for i in range(PREEMPTORS):
        objects.append(m.claim(f"high-{i}-gpu"))
        pod = m.pod(f"high-{i}", f"high-{i}-gpu")
        pod["spec"]["priority"] = 1000
        preemptors.append(pod)
    return objects + preemptors, preemptors


@pytest.mark.parametrize("backend", ["embedded", "kube"])
async def test_preemptors_under_the_scheduler_model(backend: str) -> None:
    objects, preemptors = workload()
    if backend == "kube":
        # no time limit of the service (a hold's 2 s, say) decides a count on a loaded machine
        stack_cm = kube_stack(objects, latency=0.005, in_process=True, service_options=PATIENT_SERVICE_OPTIONS)
    else:
        stack_cm = embedded_stack(objects, in_process=True, service_options=PATIENT_SERVICE_OPTIONS)
    async with stack_cm as stack, contextlib.AsyncExitStack() as extra:
        if stack.fake is not None:
            await extra.enter_async_context(ReservationController(stack.fake))
        stack = dataclasses.replace(stack, pods=preemptors)
        report, _, _ = await run_model(stack, SETTINGS)
        assert report.bound == report.pods == PREEMPTORS and report.given_up == 0, report
        # Every failed attempt is the preemption's own answer (FailedNodes while victims go, which the
        # model reports as "no node fits") or the Error wait for their claims; never a bind lost.
        allowed = ("filter: no node fits", "filter: waiting for devices of preempted pods")
        assert all(any(text in k for text in allowed) for k in report.failed_attempts), report.failed_attempts
        if stack.fake is not None:
            pods = {p["metadata"]["name"]: p for p in stack.fake.objects("Pod")}
            claims = stack.fake.objects("ResourceClaim", group="resource.k8s.io")
        else:
            b = stack.service.backend
            pods = {p["metadata"]["name"]: p for p in b.list_objects("Pod")}
            claims = b.list_objects("ResourceClaim")
        low_left = [n for n in pods if n.startswith("low-")]
        assert len(low_left) == NODES * GPUS - PREEMPTORS  # one victim per preemptor, no more
        held: dict[tuple[str, str], str] = {}
        for claim in claims:
            status = claim.get("status") or {}
            if not status.get("allocation"):
                continue
            [consumer] = status["reservedFor"]
            assert consumer["name"] in pods
            node = pods[consumer["name"]]["spec"]["nodeName"]
            for result in status["allocation"]["devices"]["results"]:
                assert result["pool"] == node
                key = (result["pool"], result["device"])
                assert key not in held, f"{key} given to {held[key]} and {consumer['name']}"
                held[key] = consumer["name"]
        assert stack.service.preemption.stats.victims == PREEMPTORS
