"""Gangs under the kube-scheduler model's group cycles (bench/scheduler_model.py, issue 27 item 6;
spec/workloads-and-gangs.md §3): each member filtered once per pass, every gang placed in one pass,
no gang hold expiring, nothing allocated twice; an infeasible gang planned once and answered from
memory at every later pass. Counts, never timings."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bench.pipeline import PATIENT_SERVICE_OPTIONS, Stack, embedded_stack, kube_stack, run_model
from bench.scheduler_model import ModelSettings
from tests import manifests as m

SETTINGS = ModelSettings(tie_break="worst", in_tree="none", binds_in_flight=16, time_limit=120)


def pod_group(name: str, min_count: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }


def gang(name: str, size: int, gpus: int) -> list[dict[str, Any]]:
    """PodGroup ``name`` and its ``size`` members ``<name>-<i>``, each with a claim of ``gpus``."""
    objects = [pod_group(name, size)]
    for i in range(size):
        objects.append(m.claim(f"{name}-{i}-gpus", gpus))
        pod = m.pod(f"{name}-{i}", f"{name}-{i}-gpus")
        pod["spec"]["schedulingGroup"] = {"podGroupName": name}
        objects.append(pod)
    return objects


@contextlib.asynccontextmanager
async def stack_for(backend: str, objects: list[dict[str, Any]], **options: Any) -> AsyncIterator[Stack]:
    service_options = {**PATIENT_SERVICE_OPTIONS, **options}
    if backend == "kube":
        async with kube_stack(
            objects, latency=0.002, in_process=True, service_options=service_options, fake_options={"gangs": True}
        ) as stack:
            yield stack
    else:
        async with embedded_stack(objects, in_process=True, service_options=service_options) as stack:
            yield stack


def claims_of(stack: Stack) -> list[dict[str, Any]]:
    if stack.fake is not None:
        claims: list[dict[str, Any]] = stack.fake.objects("ResourceClaim", group="resource.k8s.io")
        return claims
    return list(stack.service.backend.list_objects("ResourceClaim"))


@pytest.mark.parametrize("backend", ["embedded", "kube"])
async def test_every_gang_is_placed_in_one_pass_with_each_member_filtered_once(backend: str) -> None:
    """Four nodes of four GPUs and three gangs that fill them: 2 x 4, 2 x 2 and 4 x 1 GPUs."""
    objects = m.cluster(*gang("a", 2, 4), *gang("b", 2, 2), *gang("c", 4, 1), nodes=4, gpus=4)
    async with stack_for(backend, objects) as stack:
        report, _, _ = await run_model(stack, SETTINGS, groups={"default/a": 2, "default/b": 2, "default/c": 4})
        assert report.bound == report.pods == 8 and report.given_up == 0, report.summary()
        assert report.gangs_placed == 3 and len(report.gang_place_s) == 3
        assert report.gang_passes == report.gang_passes_placed == 3, report.summary()
        assert report.calls_per_member_per_pass == 1.0 and report.failed == 0, report.summary()
        assert stack.service.stats.gang_plans == {"found": 3}  # the gangs' path, one plan each
        assert stack.service.stats.holds.get("expired", 0) == 0
        devices = [
            (r["pool"], r["device"])
            for claim in claims_of(stack)
            for r in ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", [])
        ]
        assert len(devices) == len(set(devices)) == 16
        for i in range(2):  # a's members each took a whole node
            (node,) = {pool for pool, _ in devices if pool == report.placements[f"default/a-{i}"]}
            assert sum(1 for pool, _ in devices if pool == node) == 4


async def test_an_infeasible_gang_is_planned_once_and_its_retries_answered_from_memory() -> None:
    """Three members of four GPUs, two nodes of four: never placed. With the idle scheduler's pop
    from the backoff queue every pass follows the last at once (spec §3.4); the extender plans the
    gang once and answers every later pass from memory (answers never turned into ``Error``
    here: ``gang_retry_backoff=0``)."""
    objects = m.cluster(*gang("big", 3, 4), nodes=2, gpus=4)
    settings = ModelSettings(tie_break="worst", in_tree="none", time_limit=120, max_attempts=5)
    async with stack_for("embedded", objects, gang_retry_backoff=0) as stack:
        report, _, _ = await run_model(stack, settings, groups={"default/big": 3})
        assert report.bound == 0 and report.given_up == 3, report.summary()
        assert report.gang_passes == 5 and report.gang_filters == 15 and report.gang_passes_placed == 0
        assert stack.service.stats.gang_plans == {"infeasible": 1, "remembered": 4}
        assert not any((c.get("status") or {}).get("allocation") for c in claims_of(stack))


async def test_a_claim_write_failing_for_one_member_fails_the_whole_pass_and_the_gang_binds_whole_next() -> None:
    """Fault injection the real control plane cannot do cleanly: the first claim status write is
    refused. The bind barrier answers every member of the pass ``Error`` (nothing bound, nothing
    allocated), the model backs all of them off, and the next pass binds the gang whole."""
    from extender.core.errors import ApiUnavailable

    objects = m.cluster(*gang("g", 3, 2), nodes=3, gpus=2)
    async with stack_for("embedded", objects) as stack:
        stack.service.backend.faults.fail("update_claim_status", ApiUnavailable("injected"), times=1)
        report, _, _ = await run_model(stack, SETTINGS, groups={"default/g": 3})
        assert report.bound == 3 and report.gangs_placed == 1, report.summary()
        assert report.gang_passes_placed == 2  # the first pass placed the gang; its binds failed
        bind_failures = {cause: n for cause, n in report.failed_attempts.items() if cause.startswith("bind")}
        assert sum(bind_failures.values()) == 3, report.failed_attempts  # every member, not one
        assert stack.service.stats.gang_barrier.get("aborted", 0) >= 1
