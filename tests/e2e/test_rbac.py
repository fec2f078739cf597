"""Least privilege: the extender and kube-scheduler run as the ServiceAccount ``deploy/`` defines, with
its RBAC (deploy/base/rbac.yaml), and that is enough; 1.36's granular ResourceClaim status
authorization (``DRAResourceClaimGranularStatusAuthorization``, beta and on by default in 1.36) makes
the ``resourceclaims/binding`` rule necessary.

What the real API server (v1.36.3) does, checked here: writing ``status.allocation`` or
``status.reservedFor`` through ``resourceclaims/status`` also needs ``update`` on the synthetic
subresource ``resourceclaims/binding``, checked **at the cluster scope** (a namespaced RoleBinding
granting it is not enough), and a refusal is not a 403 but a **422** ``Invalid`` whose cause is
``FieldValueForbidden`` naming the missing permission (the status write passed the ordinary
authorization of ``resourceclaims/status``; the extra check runs in the claim's validation).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.controlplane.api import Api, ApiError, eventually
from tests.e2e.harness import V1, Deployment, Extender, Pair, Scenario

RBAC = "/apis/rbac.authorization.k8s.io/v1"
#: Log events that mean the extender was refused something it needs (a request, a watch).
REFUSALS = ("kube.access_denied", "watch.refused", "kube.budgets_not_watched", "kube.classic_dra_forbidden")


def _refusals(extender: Extender) -> list[dict[str, Any]]:
    return [e for e in extender.events() if e.get("event") in REFUSALS]


def test_the_deploy_serviceaccount_is_allowed_everything_the_extender_and_scheduler_do(
    scenario: Scenario, deployment: Deployment, replica: Pair
) -> None:
    """A run through every write path (template claim, bind, events, preemption: eviction and
    nominatedNodeName) as the ServiceAccount: no request or watch of the extender refused, no
    forbidden in kube-scheduler's log."""
    low, high = f"{scenario.prefix}-low", f"{scenario.prefix}-high"
    for name, value in ((low, 100), (high, 1000)):
        scenario.create(
            {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}
        )
    (node,) = scenario.nodes(1)
    gpu = scenario.device_class()
    scenario.gpus(node, 1)
    scenario.template("one-gpu", gpu)
    scenario.pod("batch", templates=["one-gpu"], priority=low)
    assert scenario.bound("batch") == node
    scenario.pod("urgent", templates=["one-gpu"], priority=high)
    eventually(lambda: scenario.admin.get_or_none(f"/api/v1/namespaces/{scenario.namespace}/pods/batch") is None,
               what="batch evicted")  # fmt: skip
    assert scenario.bound("urgent") == node
    assert scenario.event("batch", "Preempted")

    def done() -> set[str]:
        ours = f"{scenario.namespace}/"
        return {e["event"] for e in replica.extender.events() if str(e.get("pod", "")).startswith(ours)}

    eventually(lambda: {"bind.finished", "preemption.started"} <= done(), what="the binds and the preemption logged")
    assert "preemption.nominate_failed" not in done()
    # the whole session so far, every replica that ever ran: nothing refused
    for log in sorted(deployment.plane.logs.glob("dra-extender-replica-*.log")):
        refused = _refusals(Extender(deployment.kubeconfig, log))
        assert not refused, f"{log.name}: {refused[:3]}"
    for log in sorted(deployment.plane.logs.glob("kube-scheduler-replica-*.log")):
        forbidden = [line for line in log.read_text(errors="replace").splitlines() if "forbidden" in line.lower()]
        assert not forbidden, f"{log.name}: {forbidden[:3]}"


@pytest.fixture
def without_binding(scenario: Scenario, deployment: Deployment) -> Iterator[Path]:
    """A ServiceAccount bound to a copy of the ClusterRole ``dra-extender`` without
    ``resourceclaims/binding``: its token kubeconfig."""
    admin = scenario.admin
    role = admin.get(f"{RBAC}/clusterroles/dra-extender")
    rules = []
    for rule in role["rules"]:
        resources = [r for r in rule["resources"] if r != "resourceclaims/binding"]
        assert resources, "a rule for resourceclaims/binding only"
        rules.append({**rule, "resources": resources})
    assert rules != role["rules"], "the deploy ClusterRole has no resourceclaims/binding rule"
    name = f"{scenario.prefix}-without-binding"
    account = {"kind": "ServiceAccount", "name": "extender", "namespace": scenario.namespace}
    scenario.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": account})
    made = [
        (f"{RBAC}/clusterroles", {"metadata": {"name": name}, "rules": rules}),
        (
            f"{RBAC}/clusterrolebindings",
            {
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                "subjects": [account],
            },
        ),
    ]
    try:
        for path, doc in made:
            admin.create(path, doc)
        token = deployment.plane.service_account_token(scenario.namespace, "extender")
        yield deployment.plane.token_kubeconfig(name, token)
    finally:
        for path, doc in reversed(made):
            admin.delete(f"{path}/{doc['metadata']['name']}")


def _allocation(node: str, driver: str) -> dict[str, Any]:
    return {
        "devices": {"results": [{"request": "gpus", "driver": driver, "pool": node, "device": "gpu-0"}]},
        "nodeSelector": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
        },
    }


def test_the_allocation_write_needs_resourceclaims_binding_at_the_cluster_scope(
    scenario: Scenario, without_binding: Path, deployment: Deployment
) -> None:
    """The API server's own answer, without any extender: the ServiceAccount may update the
    claim's status but not its allocation; a namespaced grant of the subresource does not help."""
    (node,) = scenario.nodes(1)
    gpu = scenario.device_class()
    scenario.gpus(node, 1)
    scenario.claim("direct", gpu)
    token = deployment.plane.service_account_token(scenario.namespace, "extender")
    plane = deployment.plane
    assert plane.pki is not None
    account = Api(plane.server, plane.pki.ca.pair.cert, token=token)
    path = f"/apis/{V1}/namespaces/{scenario.namespace}/resourceclaims/direct"
    status = f"{path}/status"

    def write() -> ApiError:
        claim = account.get(path)
        claim["status"] = {"allocation": _allocation(node, scenario.driver)}
        with pytest.raises(ApiError) as refused:
            account.replace(status, claim)
        return refused.value

    error = write()
    assert error.status == 422, error
    (cause,) = error.body["details"]["causes"]
    assert cause["reason"] == "FieldValueForbidden" and cause["field"] == "status.allocation"
    assert 'requires resource="resourceclaims/binding", verb="update" permission' in cause["message"]
    # the same subresource granted in the claim's namespace only: still refused
    role = {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/binding"], "verbs": ["update", "patch"]}
    scenario.create(
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "binding", "namespace": scenario.namespace}, "rules": [role]}
    )  # fmt: skip
    scenario.create(
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "binding", "namespace": scenario.namespace},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "binding"},
         "subjects": [{"kind": "ServiceAccount", "name": "extender", "namespace": scenario.namespace}]}
    )  # fmt: skip
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"group": "resource.k8s.io", "resource": "resourceclaims",
                 "subresource": "binding", "verb": "update", "namespace": scenario.namespace}},
    }  # fmt: skip
    reviews = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
    eventually(lambda: account.create(reviews, review)["status"].get("allowed"), what="the namespaced grant in effect")
    assert write().status == 422
    # and the deploy ServiceAccount, granted it cluster-wide, may write the very same allocation
    claim = deployment.api.get(path)
    claim["status"] = {"allocation": _allocation(node, scenario.driver)}
    written = deployment.api.replace(status, claim)
    assert written["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"


def test_an_extender_without_resourceclaims_binding_answers_the_bind_with_an_error_naming_it(
    scenario: Scenario, without_binding: Path, deployment: Deployment
) -> None:
    """The real extender as that ServiceAccount, behind a kube-scheduler of its own (a profile
    named after the test): the allocation write is refused, the bind answered with Error naming
    the permission (in kube-scheduler's FailedScheduling event and the extender's log), and
    everything the bind wrote is rolled back: the pod stays unbound, its claim unallocated."""
    plane = deployment.plane
    extender = Extender(without_binding, plane.logs / f"rbac-{scenario.prefix}-extender.log").start()
    scheduler_name = f"{scenario.prefix}-without-binding"
    config = json.loads(json.dumps(deployment.scheduler_configuration))
    config["profiles"][0]["schedulerName"] = scheduler_name
    config["extenders"][0]["urlPrefix"] = extender.url + "/"
    config["leaderElection"] = {"leaderElect": False}
    config["clientConnection"] = {"kubeconfig": str(deployment.kubeconfig), "qps": 1000, "burst": 2000}
    process = f"kube-scheduler-{scheduler_name}"
    try:
        plane.start_scheduler(config, name=process)
        (node,) = scenario.nodes(1)
        gpu = scenario.device_class()
        scenario.gpus(node, 1)
        scenario.claim("direct", gpu)
        scenario.pod("p1", "direct", scheduler_name=scheduler_name)

        def refused_binds() -> list[dict[str, Any]]:
            return [
                e
                for e in extender.events()
                if e.get("event") == "bind.finished" and e.get("pod") == f"{scenario.namespace}/p1"
            ]

        (first, *_) = eventually(refused_binds, what="the bind answered")
        assert first["outcome"] == "error"
        assert "resourceclaims/binding" in first["reason"], first
        failed = eventually(
            lambda: [
                e for e in scenario.events_for("p1", "FailedScheduling") if "resourceclaims/binding" in e["message"]
            ],
            what="kube-scheduler's FailedScheduling event naming the permission",
        )
        assert 'requires resource="resourceclaims/binding", verb="update" permission' in failed[-1]["message"]
    finally:
        plane.stop_scheduler(process)
        extender.stop()
    # rolled back: unbound, unallocated, no finalizer left behind
    assert not scenario.get_pod("p1")["spec"].get("nodeName")
    claim = eventually(
        lambda: c if not (c := scenario.get_claim("direct"))["metadata"].get("finalizers") else None,
        what="the claim's finalizer removed",
    )
    assert not (claim.get("status") or {}).get("allocation")
    assert not (claim.get("status") or {}).get("reservedFor")
