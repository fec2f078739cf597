"""Template claims the resourceclaim controller has not created yet (docs/pipeline.md): filter and
prioritize answer from the ResourceClaimTemplate, bind waits for the claim (and gives up with an
Error, having written nothing), and a pod whose template is unknown still gets the Error."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from extender.backends.kube import KubeBackend
from extender.core.errors import ClaimNotCreated, ExtenderError, Transient
from extender.state.service import SchedulingService
from tests import manifests as m
from tests.backends.kube.test_backend import assert_consistent, node_of, started, until
from tests.fakes import FakeApiServer

#: For the binds that must see the controller's claim: its wait (3 s by default) is only a bound here,
#: never what a test measures, so it is generous for a loaded machine.
PATIENT: dict[str, Any] = {"claim_wait_seconds": 30.0, "bind_deadline_seconds": 60.0}


def template_pod(name: str) -> dict[str, Any]:
    return m.pod(name, templates=("gpu-template",))


def controller_claim(pod: dict[str, Any], spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """The claim kube-controller-manager makes for the pod's ``t0`` (from ``gpu-template``, or
    ``spec``), owned by the pod."""
    claim = m.claim(f"{pod['metadata']['name']}-t0-abcde")
    claim["spec"] = spec if spec is not None else m.template("gpu-template")["spec"]["spec"]
    claim["metadata"]["ownerReferences"] = pod_owner(pod)
    return claim


def name_in_status(pod: dict[str, Any], claim_name: str) -> dict[str, Any]:
    """The pod with its status naming ``claim_name`` for its ``t0``, as the controller records it."""
    pod.setdefault("status", {})["resourceClaimStatuses"] = [{"name": "t0", "resourceClaimName": claim_name}]
    return pod


def play_the_controller(fake: FakeApiServer, pod_name: str) -> str:
    """What kube-controller-manager does for the pod: the claim, then the pod's status."""
    pod = fake.get_object("Pod", "default", pod_name)
    assert pod is not None
    claim = controller_claim(pod)
    fake.put_object(claim)
    fake.put_object(name_in_status(pod, claim["metadata"]["name"]))
    return str(claim["metadata"]["name"])


def count_resolutions(service: SchedulingService) -> list[str]:
    """The names of the pods whose claims the service resolves from now on, one per resolution."""
    resolved: list[str] = []
    real = service.cluster.claims

    def counting(pod: Any, **options: Any) -> Any:
        resolved.append(pod["metadata"]["name"])
        return real(pod, **options)

    service.cluster.claims = counting  # type: ignore[method-assign]
    return resolved


async def waiting_for_its_claim(service: SchedulingService, bind: asyncio.Task[None], pod_key: str) -> None:
    """Until the bind waits for the pod's template claim (``Binder.waiting_for_claims``); a bind
    that ends instead (having not waited) fails the test at once."""
    await until(lambda: service.binder.waiting_for_claims(pod_key) or bind.done())
    assert not bind.done(), bind.exception()


async def stack(fake: FakeApiServer, **options: Any) -> tuple[KubeBackend, SchedulingService]:
    objects = m.cluster(m.template("gpu-template"), template_pod("p1"), template_pod("p2"), nodes=2, gpus=1)
    backend = await started(fake, *objects)
    return backend, SchedulingService(backend=backend, **options)


async def test_filter_and_prioritize_answer_from_the_template(fake: FakeApiServer) -> None:
    backend, service = await stack(fake)
    try:
        outcome = service.filter(template_pod("p1"), ["node-1", "node-2"])
        assert outcome.error == "" and outcome.node_names == ["node-1", "node-2"]
        assert dict(service.prioritize(template_pod("p1"), ["node-1", "node-2"])).keys() == {"node-1", "node-2"}
        # the hold of p1 (a provisional claim) is seen by p2: node-1's one GPU is taken
        assert service.filter(template_pod("p2"), ["node-1", "node-2"]).node_names == ["node-2"]
    finally:
        await backend.stop()


async def test_bind_waits_for_the_controller_then_writes_the_real_claim(fake: FakeApiServer) -> None:
    backend, service = await stack(fake, **PATIENT)
    try:
        service.prioritize(template_pod("p1"), ["node-1", "node-2"])
        bind = asyncio.create_task(service.bind("default", "p1", "uid-p1", "node-1"))
        await waiting_for_its_claim(service, bind, "default/p1")  # and holding node-1's GPU meanwhile
        assert service.filter(template_pod("p2"), ["node-1", "node-2"]).node_names == ["node-2"]
        name = play_the_controller(fake, "p1")
        await asyncio.wait_for(bind, 30)
        claim = fake.get_object("ResourceClaim", "default", name, group="resource.k8s.io")
        assert claim is not None
        assert claim["status"]["allocation"]["devices"]["results"][0]["pool"] == "node-1"
        assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "p1", "uid": "uid-p1"}]
        assert node_of(fake, "p1") == "node-1"
        assert service.stats.claim_waits == 1 and service.stats.claim_wait_seconds > 0
        # p1's entries are gone (the claim holds its GPU); p2's hold from its filter is left
        await until(lambda: all(e.pod_key != "default/p1" for e in service.ledger))
        assert [(e.pod_key, e.node, e.tentative) for e in service.ledger] == [("default/p2", "node-2", True)]
        assert_consistent(fake)
    finally:
        await backend.stop()


async def test_bind_gives_up_waiting_and_writes_nothing(fake: FakeApiServer) -> None:
    backend, service = await stack(fake, claim_wait_seconds=0.1)
    try:
        fake.clear_requests()
        with pytest.raises(ClaimNotCreated, match='pod "default/p1": ResourceClaim not created yet'):
            await service.bind("default", "p1", "uid-p1", "node-1")
        assert len(service.ledger) == 0  # the provisional entry is gone: node-1 is free again
        assert service.filter(template_pod("p2"), ["node-1"]).node_names == ["node-1"]
        assert not [r for r in fake.requests if r.method != "GET"]
    finally:
        await backend.stop()


async def test_an_unknown_template_is_still_an_error(fake: FakeApiServer) -> None:
    backend, service = await stack(fake)
    try:
        outcome = service.filter(m.pod("p3", templates=("no-such-template",)), ["node-1", "node-2"])
        assert outcome.error == 'pod "default/p3": ResourceClaim not created yet' and outcome.node_names == []
    finally:
        await backend.stop()


async def test_a_bind_that_read_the_pod_from_the_api_waits_for_its_claim_too(fake: FakeApiServer) -> None:
    """The pod watch has not shown the pod yet (bind reads it from the API); its claim comes later."""
    backend, service = await stack(fake, **PATIENT)
    try:
        backend.store.delete("Pod", "default", "p1")  # as if the watch lagged behind
        bind = asyncio.create_task(service.bind("default", "p1", "uid-p1", "node-1"))
        await waiting_for_its_claim(service, bind, "default/p1")
        assert fake.requests_to("GET", "/pods/p1$")
        play_the_controller(fake, "p1")
        await asyncio.wait_for(bind, 30)
        assert node_of(fake, "p1") == "node-1"
        assert_consistent(fake)
    finally:
        await backend.stop()


async def test_a_template_claim_wakes_only_the_bind_of_its_own_pod(fake: FakeApiServer) -> None:
    """Two binds wait for their pods' claims; the controller makes p2's: p2's bind goes on, and p1's
    is not woken by it (each wake resolves the waiting pod's claims again: with hundreds of binds
    waiting for a lagging controller, waking all of them for every claim cost more than the binds)."""
    backend, service = await stack(fake, **PATIENT)
    try:
        resolved = count_resolutions(service)
        first = asyncio.create_task(service.bind("default", "p1", "uid-p1", "node-1"))
        second = asyncio.create_task(service.bind("default", "p2", "uid-p2", "node-2"))
        await waiting_for_its_claim(service, first, "default/p1")
        await waiting_for_its_claim(service, second, "default/p2")
        before = resolved.count("p1")
        play_the_controller(fake, "p2")
        await asyncio.wait_for(second, 30)
        assert resolved.count("p1") == before and not first.done()
        play_the_controller(fake, "p1")
        await asyncio.wait_for(first, 30)
        assert (node_of(fake, "p1"), node_of(fake, "p2")) == ("node-1", "node-2")
        assert_consistent(fake)
    finally:
        await backend.stop()


def replace_during_the_writes(
    fake: FakeApiServer,
    backend: KubeBackend,
    monkeypatch: pytest.MonkeyPatch,
    spec: dict[str, Any] | None = None,
    *,
    claim_later: bool = False,
    service: SchedulingService | None = None,
) -> dict[str, Any]:
    """kube-controller-manager 1.36 can make a second claim for a pod whose first its informer has
    not shown yet, and name that one in the pod's status (kubernetes#140217; seen in 5000-node runs):
    here it does so for ``p1`` right after the bind's first claim write, made from the template's
    spec (or ``spec``), and the store shows it before the write returns; or, ``claim_later``, the
    store shows the status first, and the new claim only once the bind waits for it (the claim and
    pod watches are separate streams; ``service`` is the bind's). Once made: its ``name``, and the
    ``devices`` the first claim had then."""
    import extender.state.bind.binder as binder_module

    real_write = binder_module.write_allocation
    replaced: dict[str, Any] = {}

    async def write_then_replace(*args: Any, **kwargs: Any) -> Any:
        written = await real_write(*args, **kwargs)
        if not replaced:
            pod = fake.get_object("Pod", "default", "p1")
            assert pod is not None
            first = claim_status(fake, status_names(pod)[0])
            replaced.update(name="p1-t0-fghij", devices=allocated_devices(first))
            second = controller_claim(pod, spec)
            second["metadata"]["name"] = "p1-t0-fghij"
            if not claim_later:
                fake.put_object(second)
            fake.put_object(name_in_status(pod, "p1-t0-fghij"))
            await until(lambda: status_names(backend.store.pods["default/p1"]) == ["p1-t0-fghij"])
            if claim_later:
                asyncio.get_running_loop().create_task(put_when_waited_for(second))
        return written

    async def put_when_waited_for(claim: dict[str, Any]) -> None:
        assert service is not None
        await until(lambda: service.binder.waiting_for_claims("default/p1"))  # the bind waits for it
        assert f"default/{claim['metadata']['name']}" not in backend.store.claims
        fake.put_object(claim)

    monkeypatch.setattr(binder_module, "write_allocation", write_then_replace)
    return replaced


def allocated_devices(claim: dict[str, Any]) -> list[str]:
    return [r["device"] for r in ((claim.get("status") or {}).get("allocation") or {})["devices"]["results"]]


def claim_status(fake: FakeApiServer, name: str) -> dict[str, Any]:
    claim = fake.get_object("ResourceClaim", "default", name, group="resource.k8s.io")
    assert claim is not None
    return claim


async def claim_made_for(fake: FakeApiServer, backend: KubeBackend, service: SchedulingService, pod: str) -> str:
    """``play_the_controller`` for ``pod``, then until the service resolves the pod to that claim:
    its name."""
    name = play_the_controller(fake, pod)
    await until(lambda: f"default/{name}" in backend.store.claims and bool(service.cluster.claims(
        backend.store.pods[f"default/{pod}"], from_templates=False).all))  # fmt: skip
    return name


def assert_undone(fake: FakeApiServer, *names: str) -> None:
    """Each claim holds no allocation and no finalizer (what a bind wrote to it is undone)."""
    for name in names:
        claim = claim_status(fake, name)
        assert not (claim.get("status") or {}).get("allocation"), name
        assert not (claim["metadata"].get("finalizers") or []), name


@pytest.mark.parametrize("claim_later", [False, True], ids=["claim first", "status first"])
async def test_a_claim_the_controller_replaced_before_the_binding_gets_the_devices_and_the_pod_binds(
    fake: FakeApiServer, monkeypatch: pytest.MonkeyPatch, claim_later: bool
) -> None:
    """The bind sees the status change before its binding: the new claim is made from the same
    spec, so it gets the same devices (written before the first claim lets them go), the first
    claim's writes are undone, and the pod binds in this attempt (no failed attempt)."""
    backend, service = await stack(fake, **PATIENT)
    try:
        first = await claim_made_for(fake, backend, service, "p1")
        replaced = replace_during_the_writes(fake, backend, monkeypatch, claim_later=claim_later, service=service)
        await service.bind("default", "p1", "uid-p1", "node-1")
        assert replaced["name"] == "p1-t0-fghij" and node_of(fake, "p1") == "node-1"
        assert_undone(fake, first)  # the finalizer it wrote is gone too
        moved = claim_status(fake, "p1-t0-fghij")
        assert moved["status"]["reservedFor"][0]["uid"] == "uid-p1"
        assert allocated_devices(moved) == replaced["devices"] and len(replaced["devices"]) == 1
        # the new claim holds the devices before the first lets them go
        puts = [r.path for r in fake.requests if r.method == "PUT" and r.path.endswith("/status")]
        assert puts.index("/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/p1-t0-fghij/status") < max(
            i for i, path in enumerate(puts) if path.endswith(f"/resourceclaims/{first}/status")
        )
        assert service.stats.replaced_claims.get("moved", 0) == 1
        await until(lambda: all(e.pod_key != "default/p1" for e in service.ledger))
        assert_consistent(fake)
    finally:
        await backend.stop()


async def test_a_failed_write_of_the_replacement_undoes_both_claims(
    fake: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replacement's allocation cannot be written: both claims' writes are undone (the
    replacement's finalizer too), the pod is not bound, the ledger holds nothing for it, and the
    next attempt binds with the replacement."""
    backend, service = await stack(fake, **PATIENT)
    try:
        first = await claim_made_for(fake, backend, service, "p1")
        replace_during_the_writes(fake, backend, monkeypatch)
        fake.fail("PUT", r"/resourceclaims/p1-t0-fghij/status$", status=500)
        with pytest.raises(ExtenderError):
            await service.bind("default", "p1", "uid-p1", "node-1")
        assert node_of(fake, "p1") is None and service.stats.replaced_claims.get("moved", 0) == 0
        assert_undone(fake, first, "p1-t0-fghij")
        assert all(e.pod_key != "default/p1" for e in service.ledger)
        await service.bind("default", "p1", "uid-p1", "node-1")  # kube-scheduler's next attempt
        assert claim_status(fake, "p1-t0-fghij")["status"]["reservedFor"][0]["uid"] == "uid-p1"
        assert node_of(fake, "p1") == "node-1"
        assert_consistent(fake)
    finally:
        await backend.stop()


async def test_a_binding_refused_after_a_move_undoes_both_claims(
    fake: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The devices moved, then the binding is refused: the moved claim's writes are undone as the
    first's were, and the ledger keeps nothing of the pod."""
    backend, service = await stack(fake, **PATIENT)
    try:
        first = await claim_made_for(fake, backend, service, "p1")
        replace_during_the_writes(fake, backend, monkeypatch)
        fake.fail("POST", r"/pods/p1/binding$", status=409)
        with pytest.raises(ExtenderError):
            await service.bind("default", "p1", "uid-p1", "node-1")
        assert node_of(fake, "p1") is None and service.stats.replaced_claims.get("moved", 0) == 1
        assert_undone(fake, first, "p1-t0-fghij")
        assert all(e.pod_key != "default/p1" for e in service.ledger)
        assert_consistent(fake)
    finally:
        await backend.stop()


async def test_a_replacement_of_another_spec_is_undone_and_the_next_attempt_binds(
    fake: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the devices cannot simply move (here the new claim asks for something else), the bind
    undoes its writes and fails the attempt, and the next attempt allocates the claim now named."""
    backend, service = await stack(fake, **PATIENT)
    try:
        first = await claim_made_for(fake, backend, service, "p1")
        other_spec = m.template("gpu-template")["spec"]["spec"]
        other_spec["devices"]["requests"][0]["name"] = "other"
        replace_during_the_writes(fake, backend, monkeypatch, other_spec)
        with pytest.raises(Transient, match="its status names ResourceClaim p1-t0-fghij"):
            await service.bind("default", "p1", "uid-p1", "node-1")
        assert node_of(fake, "p1") is None and service.stats.replaced_claims.get("moved", 0) == 0
        assert_undone(fake, first)
        await until(lambda: all(e.pod_key != "default/p1" for e in service.ledger))
        await service.bind("default", "p1", "uid-p1", "node-1")  # kube-scheduler's next attempt
        assert claim_status(fake, "p1-t0-fghij")["status"]["reservedFor"][0]["uid"] == "uid-p1"
        assert node_of(fake, "p1") == "node-1"
        assert_consistent(fake)
    finally:
        await backend.stop()


def pod_owner(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"],
             "controller": True}]  # fmt: skip


def status_names(pod: dict[str, Any]) -> list[str]:
    return [s.get("resourceClaimName") for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []]
