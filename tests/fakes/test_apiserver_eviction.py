"""The fake apiserver's PodDisruptionBudgets, Eviction subresource and pods/status patches over real
HTTP: discovery, budget validation, each rule of ``EvictionREST.Create`` (``disruption.py``), the
disruption controller pass ``sync_disruption_budgets`` and ``status.nominatedNodeName`` patches.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from .apiserver import FakeApiServer
from .helpers import CLAIMS, PDBS, PODS, Watch, call, claim, eviction, pdb, pod

APP = {"app": "train"}
SUCCESS = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
VIOLATION = "Cannot evict pod as it would violate the pod's disruption budget."


async def _evict(http: aiohttp.ClientSession, name: str, **options: Any) -> tuple[int, Any]:
    return await call(http, "POST", f"{PODS}/{name}/eviction", eviction(name, **options))


def _budget(fake: FakeApiServer, name: str) -> dict[str, Any]:
    stored = fake.get_object("PodDisruptionBudget", "default", name)
    assert stored is not None
    return stored


def _running(fake: FakeApiServer, *names: str, labels: dict[str, str] = APP, ready: bool = True) -> list[str]:
    """Running pods (Ready unless told) put directly; returns their uids."""
    return [
        fake.put_object(pod(n, node="node-1", labels=labels, ready=ready, phase="Running"))["metadata"]["uid"]
        for n in names
    ]


# --- discovery and the PodDisruptionBudget type -----------------------------------------------------


async def test_discovery_lists_policy_and_the_eviction_subresource(http: aiohttp.ClientSession) -> None:
    _, groups = await call(http, "GET", "/apis")
    policy = next(g for g in groups["groups"] if g["name"] == "policy")
    assert policy["preferredVersion"] == {"groupVersion": "policy/v1", "version": "v1"}
    status, group = await call(http, "GET", "/apis/policy")
    assert status == 200 and [v["version"] for v in group["versions"]] == ["v1"]
    _, resources = await call(http, "GET", "/apis/policy/v1")
    by_name = {r["name"]: r for r in resources["resources"]}
    assert by_name["poddisruptionbudgets"]["namespaced"] is True
    assert by_name["poddisruptionbudgets"]["shortNames"] == ["pdb"]
    assert by_name["poddisruptionbudgets/status"]["verbs"] == ["get", "patch", "update"]
    _, core = await call(http, "GET", "/api/v1")
    core_resources = {r["name"]: r for r in core["resources"]}
    assert core_resources["pods/eviction"] == {
        "name": "pods/eviction",
        "singularName": "",
        "namespaced": True,
        "group": "policy",
        "version": "v1",
        "kind": "Eviction",
        "verbs": ["create"],
    }
    status, _ = await call(http, "GET", "/apis/policy/v1beta1")
    assert status == 404


async def test_budget_create_resets_status_and_validates_the_spec(http: aiohttp.ClientSession) -> None:
    raw = pdb("budget", APP, min_available=1, disruptions_allowed=5)
    status, created = await call(http, "POST", PDBS, raw)
    assert status == 201 and created["kind"] == "PodDisruptionBudget"
    assert created["metadata"]["generation"] == 1
    assert created["status"] == {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}
    status, body = await call(http, "POST", PDBS, pdb("both", APP, min_available=1, max_unavailable=1))
    assert status == 422
    assert body["message"] == (
        'PodDisruptionBudget.policy "both" is invalid: spec: Invalid value: "object": '
        "minAvailable and maxUnavailable cannot be both set"
    )
    status, body = await call(http, "POST", PDBS, pdb("negative", APP, min_available=-1))
    assert status == 422 and body["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": "Invalid value: -1: must be greater than or equal to 0",
            "field": "spec.minAvailable",
        }
    ]
    status, body = await call(http, "POST", PDBS, pdb("percent", APP, max_unavailable="150%"))
    assert status == 422 and "must not be greater than 100%" in body["message"]
    bad_selector = pdb("selector")
    bad_selector["spec"]["selector"] = {"matchExpressions": [{"key": "app", "operator": "In"}]}
    status, body = await call(http, "POST", PDBS, bad_selector)
    assert status == 422 and body["details"]["causes"][0]["field"] == "spec.selector.matchExpressions[0].values"
    status, _ = await call(http, "POST", PDBS, pdb("percent-ok", APP, max_unavailable="50%"))
    assert status == 201


async def test_budget_status_goes_through_the_status_subresource(http: aiohttp.ClientSession) -> None:
    _, created = await call(http, "POST", PDBS, pdb("budget", APP, min_available=1))
    created["status"] = {"disruptionsAllowed": 3}
    created["spec"]["minAvailable"] = 2
    status, updated = await call(http, "PUT", f"{PDBS}/budget", created)
    assert status == 200 and updated["status"]["disruptionsAllowed"] == 0 and updated["metadata"]["generation"] == 2
    patch = {"status": {"disruptionsAllowed": 1, "observedGeneration": 2}}
    status, patched = await call(
        http, "PATCH", f"{PDBS}/budget/status", patch, content_type="application/merge-patch+json"
    )
    assert status == 200 and patched["status"]["disruptionsAllowed"] == 1 and patched["spec"]["minAvailable"] == 2
    negative = {"status": {"disruptionsAllowed": -1}}
    status, body = await call(
        http, "PATCH", f"{PDBS}/budget/status", negative, content_type="application/merge-patch+json"
    )
    assert status == 422 and body["details"]["causes"][0]["field"] == "status.disruptionsAllowed"


# --- eviction without budgets ----------------------------------------------------------------------


async def test_eviction_deletes_the_pod_and_watches_see_it_go(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    (uid,) = _running(fake, "victim")
    owned = claim("victim-gpu")
    owned["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "victim", "uid": uid, "controller": True}
    ]
    fake.put_object(owned)
    async with Watch(http, PODS, resourceVersion=str(fake.resource_version)) as watch:
        status, body = await _evict(http, "victim", uid=uid)
        assert (status, body) == (201, SUCCESS)
        modified, marked, deleted = await watch.next(), await watch.next(), await watch.next()
    assert modified["type"] == "MODIFIED"
    disruption = [c for c in modified["object"]["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert disruption == [
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "EvictionByEvictionAPI",
            "message": "Eviction API: evicting",
            "lastProbeTime": None,
            "lastTransitionTime": disruption[0]["lastTransitionTime"],
        }
    ]
    # then deleted as a DELETE deletes a pod on a node: marked with the grace period (30 s, the default), gone
    assert marked["type"] == "MODIFIED" and marked["object"]["metadata"]["deletionGracePeriodSeconds"] == 30
    assert deleted["type"] == "DELETED" and deleted["object"]["metadata"]["uid"] == uid
    assert fake.get_object("Pod", "default", "victim") is None
    assert fake.get_object("ResourceClaim", "default", "victim-gpu") is None  # garbage-collected with its pod
    record = fake.requests_to("POST", "/eviction$")[-1]
    assert record.path == "/api/v1/namespaces/default/pods/victim/eviction" and record.status == 201


async def test_absent_pod_is_404_and_preconditions_are_409(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    status, body = await _evict(http, "nobody")
    assert status == 404 and body["message"] == 'pods "nobody" not found' and body["reason"] == "NotFound"
    (uid,) = _running(fake, "victim")
    status, body = await _evict(http, "victim", uid="stale-uid")
    assert status == 409
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": (
            'Operation cannot be fulfilled on Pod "victim": the UID in the precondition (stale-uid) does not match '
            f"the UID in record ({uid}). The object might have been deleted and then recreated"
        ),
        "reason": "Conflict",
        "details": {"name": "victim", "kind": "Pod"},
        "code": 409,
    }
    status, body = await _evict(http, "victim", preconditions={"resourceVersion": "1"})
    assert status == 409 and "the ResourceVersion in the precondition (1) does not match" in body["message"]
    stored = fake.get_object("Pod", "default", "victim")
    assert stored is not None and "conditions" in stored["status"]
    assert [c["type"] for c in stored["status"]["conditions"]] == ["Ready"]  # untouched
    status, _ = await _evict(http, "victim", uid=uid)
    assert status == 201


async def test_malformed_evictions(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    _running(fake, "victim")
    status, body = await call(http, "POST", f"{PODS}/victim/eviction", eviction("other"))
    assert (status, body["message"]) == (400, "name in URL does not match name in Eviction object")
    wrong = {**eviction("victim"), "apiVersion": "v1"}
    status, body = await call(http, "POST", f"{PODS}/victim/eviction", wrong)
    assert status == 400 and "does not match the expected API version (policy/v1)" in body["message"]
    status, _ = await call(http, "POST", f"{PODS}/victim/eviction", eviction("victim", namespace="kube-system"))
    assert status == 400
    status, _ = await call(http, "POST", f"{PODS}/victim/eviction", eviction("victim", dryRun=["All"]))
    assert status == 400
    status, _ = await call(http, "GET", f"{PODS}/victim/eviction")
    assert status == 405
    legacy = {**eviction("victim"), "apiVersion": "policy/v1beta1"}
    status, _ = await call(http, "POST", f"{PODS}/victim/eviction", legacy)
    assert status == 201


async def test_rbac_denies_create_on_pods_eviction(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    _running(fake, "victim")
    fake.deny("create", "pods/eviction")
    status, body = await _evict(http, "victim")
    assert status == 403 and body["reason"] == "Forbidden"
    assert body["message"] == (
        'pods/eviction "victim" is forbidden: User "system:serviceaccount:kube-system:dra-extender" cannot create '
        'resource "pods/eviction" in API group "" in the namespace "default"'
    )
    assert fake.get_object("Pod", "default", "victim") is not None
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {
            "resourceAttributes": {
                "verb": "create",
                "resource": "pods",
                "subresource": "eviction",
                "namespace": "default",
            }
        },
    }
    _, answer = await call(http, "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review)
    assert answer["status"]["allowed"] is False
    status, _ = await call(http, "DELETE", f"{PODS}/victim")  # plain deletes are another permission
    assert status == 200


# --- budgets -----------------------------------------------------------------------------------------


async def test_eviction_spends_the_budget_then_is_429(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    fake.put_object(pdb("budget", APP, min_available=2, disruptions_allowed=1))
    _running(fake, "a", "b", "c")
    async with Watch(http, PDBS, resourceVersion=str(fake.resource_version)) as watch:
        status, body = await _evict(http, "a")
        assert (status, body) == (201, SUCCESS)
        event = await watch.next()
    assert event["type"] == "MODIFIED" and event["object"]["status"]["disruptionsAllowed"] == 0
    budget = _budget(fake, "budget")["status"]
    assert list(budget["disruptedPods"]) == ["a"] and budget["disruptedPods"]["a"].endswith("Z")
    assert [(c["type"], c["status"], c["reason"]) for c in budget["conditions"]] == [
        ("DisruptionAllowed", "False", "InsufficientPods")
    ]
    assert fake.get_object("Pod", "default", "a") is None
    async with http.post(f"{PODS}/b/eviction", json=eviction("b")) as response:
        assert response.status == 429 and "Retry-After" not in response.headers
        body = await response.json()
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": VIOLATION,
        "reason": "TooManyRequests",
        "details": {
            "causes": [
                {
                    "reason": "DisruptionBudget",
                    "message": "The disruption budget budget needs 2 healthy pods and has 2 currently",
                }
            ]
        },
        "code": 429,
    }
    stored = fake.get_object("Pod", "default", "b")
    assert stored is not None and len(stored["status"]["conditions"]) == 1  # no DisruptionTarget either
    assert _budget(fake, "budget")["status"]["disruptionsAllowed"] == 0


async def test_429_quotes_the_status_counts_when_present(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    raw = pdb("budget", APP, min_available=1)
    raw["status"] = {"disruptionsAllowed": 0, "desiredHealthy": 7, "currentHealthy": 3}
    fake.put_object(raw)
    _running(fake, "a")
    status, body = await _evict(http, "a")
    assert status == 429
    assert (
        body["details"]["causes"][0]["message"]
        == "The disruption budget budget needs 7 healthy pods and has 3 currently"
    )


async def test_only_budgets_whose_selector_matches_count(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    fake.put_object(pdb("other-app", {"app": "serve"}, disruptions_allowed=0))
    fake.put_object(pdb("no-selector", None, disruptions_allowed=0))  # nil selects nothing
    expressions = pdb("expressions", disruptions_allowed=0)
    expressions["spec"]["selector"] = {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}]}
    fake.put_object(expressions)
    other_namespace = pdb("elsewhere", APP, disruptions_allowed=0, namespace="kube-system")
    fake.put_object(other_namespace)
    _running(fake, "plain")
    _running(fake, "gold", labels={"app": "train", "tier": "gold"})
    status, _ = await _evict(http, "plain")
    assert status == 201
    status, body = await _evict(http, "gold")
    # no healthy counts written and none that explain it (0 desired): 1.36's generic wording
    assert status == 429
    assert body["details"]["causes"][0]["message"] == (
        "The disruption budget expressions does not allow evicting pods currently"
    )


async def test_an_empty_selector_selects_every_pod(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    """policy/v1: ``selector: {}`` matches all pods of the namespace, unlabeled ones too (the
    eviction handler's LabelSelectorAsSelector; only a missing selector matches nothing)."""
    everything = pdb("everything", disruptions_allowed=0)
    everything["spec"]["selector"] = {}
    fake.put_object(everything)
    _running(fake, "unlabeled", labels={})
    status, body = await _evict(http, "unlabeled")
    assert status == 429 and body["details"]["causes"][0]["message"].startswith("The disruption budget everything")


async def test_more_than_one_budget_is_500(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    fake.put_object(pdb("one", APP, disruptions_allowed=5))
    fake.put_object(pdb("two", {"app": "train"}, disruptions_allowed=5))
    _running(fake, "a")
    status, body = await _evict(http, "a")
    assert (status, body) == (
        500,
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": (
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
            ),
            "code": 500,
        },
    )
    assert fake.get_object("Pod", "default", "a") is not None
    assert _budget(fake, "one")["status"] == {"disruptionsAllowed": 5}


@pytest.mark.parametrize("phase", ["Succeeded", "Failed", "Pending"])
async def test_pods_that_are_done_or_pending_skip_the_budget(
    fake: FakeApiServer, http: aiohttp.ClientSession, phase: str
) -> None:
    fake.put_object(pdb("budget", APP, disruptions_allowed=0))
    fake.put_object(pod("done", labels=APP, phase=phase))
    status, body = await _evict(http, "done")
    assert (status, body) == (201, SUCCESS)
    assert fake.get_object("Pod", "default", "done") is None
    assert _budget(fake, "budget")["status"] == {"disruptionsAllowed": 0}


async def test_pod_created_over_http_is_pending_and_skips_the_budget(
    fake: FakeApiServer, http: aiohttp.ClientSession
) -> None:
    fake.put_object(pdb("budget", APP, disruptions_allowed=0))
    await call(http, "POST", PODS, pod("fresh", labels=APP))
    status, _ = await _evict(http, "fresh")
    assert status == 201


async def test_terminating_pod_skips_the_budget_and_finalizers_are_respected(
    fake: FakeApiServer, http: aiohttp.ClientSession
) -> None:
    fake.put_object(pdb("budget", APP, disruptions_allowed=1))
    held = pod("held", labels=APP, ready=True)
    held["metadata"]["finalizers"] = ["example.com/hold"]
    fake.put_object(held)
    status, _ = await _evict(http, "held")
    assert status == 201
    marked = fake.get_object("Pod", "default", "held")
    assert marked is not None and marked["metadata"]["deletionTimestamp"]
    assert _budget(fake, "budget")["status"]["disruptionsAllowed"] == 0  # spent by the first eviction
    status, _ = await _evict(http, "held")  # being deleted now: no budget check, nothing more to do
    assert status == 201
    assert _budget(fake, "budget")["status"]["disruptionsAllowed"] == 0
    marked["metadata"]["finalizers"] = []
    status, _ = await call(http, "PUT", f"{PODS}/held", marked)
    assert status == 200 and fake.get_object("Pod", "default", "held") is None


async def test_unready_pods_may_go_without_spending_the_budget(
    fake: FakeApiServer, http: aiohttp.ClientSession
) -> None:
    healthy_budget = pdb("healthy", {"app": "a"}, min_available=1)
    healthy_budget["status"] = {"disruptionsAllowed": 0, "currentHealthy": 2, "desiredHealthy": 1}
    fake.put_object(healthy_budget)
    always = pdb("always", {"app": "b"}, min_available=5, disruptions_allowed=0)
    always["spec"]["unhealthyPodEvictionPolicy"] = "AlwaysAllow"
    fake.put_object(always)
    fake.put_object(pdb("short", {"app": "c"}, min_available=5, disruptions_allowed=0))
    _running(fake, "unready-a", labels={"app": "a"}, ready=False)
    _running(fake, "unready-b", labels={"app": "b"}, ready=False)
    _running(fake, "unready-c", labels={"app": "c"}, ready=False)
    assert (await _evict(http, "unready-a"))[0] == 201
    assert (await _evict(http, "unready-b"))[0] == 201
    assert (await _evict(http, "unready-c"))[0] == 429
    assert _budget(fake, "healthy")["status"]["disruptionsAllowed"] == 0
    assert "disruptedPods" not in _budget(fake, "always")["status"]


async def test_stale_or_negative_budgets(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    stale = pdb("stale", {"app": "a"}, min_available=1)
    stale["metadata"]["generation"] = 3
    stale["status"] = {"disruptionsAllowed": 4, "observedGeneration": 2}
    fake.put_object(stale)
    fake.put_object(pdb("negative", {"app": "b"}, disruptions_allowed=-1))
    _running(fake, "a", labels={"app": "a"})
    _running(fake, "b", labels={"app": "b"})
    async with http.post(f"{PODS}/a/eviction", json=eviction("a")) as response:
        assert response.status == 429 and response.headers["Retry-After"] == "10"
        body = await response.json()
    assert body["message"] == VIOLATION and body["details"] == {
        "causes": [
            {
                "reason": "DisruptionBudget",
                "message": "The disruption budget stale is still being processed by the server.",
            }
        ],
        "retryAfterSeconds": 10,
    }
    status, body = await _evict(http, "b")
    assert (
        status == 403
        and body["message"] == 'poddisruptionbudget.policy "negative" is forbidden: pdb disruptions allowed is negative'
    )
    assert body["details"] == {"name": "negative", "group": "policy", "kind": "poddisruptionbudget"}


async def test_a_stale_uid_still_spends_the_budget_like_the_real_server(
    fake: FakeApiServer, http: aiohttp.ClientSession
) -> None:
    """The handler checks the delete's preconditions only after checkAndDecrement wrote the budget."""
    fake.put_object(pdb("budget", APP, disruptions_allowed=1))
    _running(fake, "a")
    status, _ = await _evict(http, "a", uid="recreated")
    assert status == 409
    assert _budget(fake, "budget")["status"]["disruptionsAllowed"] == 0
    assert fake.get_object("Pod", "default", "a") is not None


async def test_sync_disruption_budgets_computes_the_status(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    fake.put_object(pdb("min", APP, min_available=2))
    fake.put_object(pdb("max", APP, max_unavailable="50%"))
    _running(fake, "a", "b", "c")
    _running(fake, "d", ready=False)
    assert fake.sync_disruption_budgets() == 2
    minimum = _budget(fake, "min")
    assert {k: v for k, v in minimum["status"].items() if k != "conditions"} == {
        "observedGeneration": 1,
        "disruptionsAllowed": 1,
        "currentHealthy": 3,
        "desiredHealthy": 2,
        "expectedPods": 4,
    }
    assert [(c["type"], c["status"], c["reason"]) for c in minimum["status"]["conditions"]] == [
        ("DisruptionAllowed", "True", "SufficientPods")
    ]
    assert _budget(fake, "max")["status"]["desiredHealthy"] == 2  # 4 - ceil(50% of 4)
    assert fake.sync_disruption_budgets() == 0  # nothing changed
    fake.delete_object("PodDisruptionBudget", "default", "max")
    status, _ = await _evict(http, "a")
    assert status == 201
    assert _budget(fake, "min")["status"]["disruptedPods"].keys() == {"a"}
    assert fake.sync_disruption_budgets() == 1
    after = _budget(fake, "min")["status"]
    assert "disruptedPods" not in after and (after["disruptionsAllowed"], after["currentHealthy"]) == (0, 2)
    assert after["conditions"][0]["reason"] == "InsufficientPods"
    assert (await _evict(http, "b"))[0] == 429


# --- nominatedNodeName -------------------------------------------------------------------------------


@pytest.mark.parametrize("content_type", ["application/merge-patch+json", "application/strategic-merge-patch+json"])
async def test_status_patch_sets_and_clears_nominated_node_name(
    fake: FakeApiServer, http: aiohttp.ClientSession, content_type: str
) -> None:
    _, created = await call(http, "POST", PODS, pod("preemptor"))
    uid = created["metadata"]["uid"]
    async with Watch(http, PODS, resourceVersion=created["metadata"]["resourceVersion"]) as watch:
        patch = {"metadata": {"uid": uid}, "status": {"nominatedNodeName": "node-1"}}
        status, patched = await call(http, "PATCH", f"{PODS}/preemptor/status", patch, content_type=content_type)
        assert status == 200 and patched["status"] == {"phase": "Pending", "nominatedNodeName": "node-1"}
        event = await watch.next()
    assert event["type"] == "MODIFIED" and event["object"]["status"]["nominatedNodeName"] == "node-1"
    _, listed = await call(http, "GET", PODS, params={"fieldSelector": "status.nominatedNodeName=node-1"})
    assert [p["metadata"]["name"] for p in listed["items"]] == ["preemptor"]
    stale = {"metadata": {"uid": "other"}, "status": {"nominatedNodeName": "node-2"}}
    status, body = await call(http, "PATCH", f"{PODS}/preemptor/status", stale, content_type=content_type)
    # a uid in a patch is no precondition: it would change an immutable field (as on kube-apiserver 1.36)
    assert status == 422
    assert body["message"] == 'Pod "preemptor" is invalid: metadata.uid: Invalid value: "other": field is immutable'
    clear = {"metadata": {"uid": uid}, "status": {"nominatedNodeName": None}}
    status, cleared = await call(http, "PATCH", f"{PODS}/preemptor/status", clear, content_type=content_type)
    assert status == 200 and "nominatedNodeName" not in cleared["status"]
    status, body = await call(http, "PATCH", f"{PODS}/nobody/status", clear, content_type=content_type)
    assert status == 404
    spec_too = {"spec": {"nodeName": "node-1"}, "status": {"nominatedNodeName": "node-1"}}
    status, patched = await call(http, "PATCH", f"{PODS}/preemptor/status", spec_too, content_type=content_type)
    assert status == 200 and "nodeName" not in patched["spec"]  # the status subresource takes status only


async def test_status_patch_rbac_is_patch_on_pods_status(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    await call(http, "POST", PODS, pod("preemptor"))
    fake.deny("patch", "pods/status")
    patch = {"status": {"nominatedNodeName": "node-1"}}
    status, body = await call(
        http, "PATCH", f"{PODS}/preemptor/status", patch, content_type="application/merge-patch+json"
    )
    assert status == 403 and 'cannot patch resource "pods/status"' in body["message"]


async def test_evicted_claims_consumers_are_unaffected(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    """A claim the pod does not own (shared, standalone) stays when the pod is evicted."""
    _running(fake, "a")
    await call(http, "POST", CLAIMS, claim("shared"))
    assert (await _evict(http, "a"))[0] == 201
    assert fake.get_object("ResourceClaim", "default", "shared") is not None
