"""The embedded resourceclaim controller: claims created from ResourceClaimTemplates for pods
(generated names, owner reference, labels and annotations, spec and apiVersion of the template,
the pod's ``status.resourceClaimStatuses`` entry), reuse of an owned claim, idempotence, missing
templates, long names, and the pods loaded from manifests."""

from __future__ import annotations

import random
import re
from typing import Any

from extender.backends.embedded import EmbeddedBackend
from extender.backends.embedded.claims import NAME_ALPHABET, POD_CLAIM_NAME_ANNOTATION, generate_name

from .helpers import claim, device_class, pod, template

TEMPLATE_CLAIM = [{"name": "gpu", "resourceClaimTemplateName": "gpu-template"}]


def template_claims(backend: EmbeddedBackend) -> list[dict[str, Any]]:
    return [c for c in backend.list_objects("ResourceClaim") if c["metadata"].get("ownerReferences")]


def test_claim_is_created_from_the_template_and_recorded() -> None:
    backend = EmbeddedBackend([device_class(), template()])
    backend.observe_pod(pod(claims=TEMPLATE_CLAIM))
    [created] = template_claims(backend)
    meta = created["metadata"]
    assert re.fullmatch(rf"pod-0-gpu-[{NAME_ALPHABET}]{{5}}", meta["name"])
    assert meta["generateName"] == "pod-0-gpu-"
    assert meta["namespace"] == "default"
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "pod-0",
            "uid": "pod-uid-0",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert meta["labels"] == {"team": "ml"}
    assert meta["annotations"] == {"note": "from template", POD_CLAIM_NAME_ANNOTATION: "gpu"}
    assert created["spec"] == template()["spec"]["spec"]
    assert created["apiVersion"] == "resource.k8s.io/v1"
    assert meta["uid"] and meta["resourceVersion"]
    stored_pod = backend.store.pods["default/pod-0"]
    assert stored_pod["status"]["resourceClaimStatuses"] == [{"name": "gpu", "resourceClaimName": meta["name"]}]
    assert f"default/{meta['name']}" in backend.store.claims


def test_the_claim_has_the_templates_api_version() -> None:
    raw_template = template(api_version="resource.k8s.io/v1beta1")
    raw_template["spec"]["spec"] = {"devices": {"requests": [{"name": "req-0", "deviceClassName": "gpu"}]}}
    backend = EmbeddedBackend([raw_template])
    backend.observe_pod(pod(claims=TEMPLATE_CLAIM))
    [created] = template_claims(backend)
    assert created["apiVersion"] == "resource.k8s.io/v1beta1"
    assert backend.store.claims[f"default/{created['metadata']['name']}"].requests[0].name == "req-0"


def test_repeated_observation_creates_nothing_more() -> None:
    backend = EmbeddedBackend([template()])
    backend.observe_pod(pod(claims=TEMPLATE_CLAIM))
    version = backend.resource_version
    backend.observe_pod(pod(claims=TEMPLATE_CLAIM))
    assert backend.resource_version == version
    assert len(template_claims(backend)) == 1


def test_an_owned_claim_from_an_earlier_attempt_is_reused() -> None:
    # The controller created the claim but failed before writing the pod status.
    leftover = claim("pod-0-gpu-abcde")
    leftover["metadata"]["annotations"] = {POD_CLAIM_NAME_ANNOTATION: "gpu"}
    leftover["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "pod-0", "uid": "pod-uid-0", "controller": True}
    ]
    backend = EmbeddedBackend([template(), leftover])
    backend.observe_pod(pod(claims=TEMPLATE_CLAIM))
    assert len(backend.list_objects("ResourceClaim")) == 1
    statuses = backend.store.pods["default/pod-0"]["status"]["resourceClaimStatuses"]
    assert statuses == [{"name": "gpu", "resourceClaimName": "pod-0-gpu-abcde"}]


def test_a_claim_owned_by_another_pod_or_pod_claim_is_not_reused() -> None:
    other_owner = claim("pod-0-gpu-abcde")
    other_owner["metadata"]["annotations"] = {POD_CLAIM_NAME_ANNOTATION: "gpu"}
    other_owner["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "pod-0", "uid": "earlier-pod", "controller": True}
    ]
    other_name = claim("pod-0-nic-abcde")
    other_name["metadata"]["annotations"] = {POD_CLAIM_NAME_ANNOTATION: "nic"}
    other_name["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "pod-0", "uid": "pod-uid-0", "controller": True}
    ]
    backend = EmbeddedBackend([template(), other_owner, other_name])
    backend.observe_pod(pod(claims=TEMPLATE_CLAIM))
    [entry] = backend.store.pods["default/pod-0"]["status"]["resourceClaimStatuses"]
    assert entry["resourceClaimName"] not in {"pod-0-gpu-abcde", "pod-0-nic-abcde"}
    assert len(backend.list_objects("ResourceClaim")) == 3


def test_missing_template_leaves_the_pod_without_an_entry_until_it_appears() -> None:
    backend = EmbeddedBackend()
    backend.observe_pod(pod(claims=TEMPLATE_CLAIM))
    assert "resourceClaimStatuses" not in (backend.store.pods["default/pod-0"].get("status") or {})
    assert backend.store.claims == {}
    backend.apply(template())
    backend.observe_pod(pod(claims=TEMPLATE_CLAIM))
    assert len(backend.store.pods["default/pod-0"]["status"]["resourceClaimStatuses"]) == 1


def test_only_template_claims_without_an_entry_are_handled() -> None:
    claims = [
        {"name": "direct", "resourceClaimName": "claim-0"},
        {"name": "done", "resourceClaimTemplateName": "gpu-template"},
        {"name": "gpu", "resourceClaimTemplateName": "gpu-template"},
    ]
    raw = pod(claims=claims)
    raw["status"] = {"resourceClaimStatuses": [{"name": "done", "resourceClaimName": "already-there"}]}
    backend = EmbeddedBackend([template(), claim(), raw])
    statuses = backend.store.pods["default/pod-0"]["status"]["resourceClaimStatuses"]
    assert [s["name"] for s in statuses] == ["done", "gpu"]
    assert statuses[0]["resourceClaimName"] == "already-there"
    assert len(template_claims(backend)) == 1


def test_a_pod_being_deleted_gets_no_claims() -> None:
    raw = pod(claims=TEMPLATE_CLAIM)
    raw["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    raw["metadata"]["finalizers"] = ["example.com/keep"]
    backend = EmbeddedBackend([template(), raw])
    assert backend.store.claims == {}


def test_pods_loaded_from_manifests_get_their_claims_in_their_namespace() -> None:
    backend = EmbeddedBackend(
        [
            pod("a", "team-a", uid="uid-a", claims=TEMPLATE_CLAIM),
            template(namespace="team-a"),
            pod("b", "team-b", uid="uid-b", claims=TEMPLATE_CLAIM),  # no template in team-b
        ]
    )
    assert [key.split("/")[0] for key in backend.store.claims] == ["team-a"]
    assert "resourceClaimStatuses" in backend.store.pods["team-a/a"]["status"]
    assert "status" not in backend.store.pods["team-b/b"]


def test_generated_names_are_unique_and_seedable() -> None:
    first = EmbeddedBackend([template()], rng=random.Random(7))
    second = EmbeddedBackend([template()], rng=random.Random(7))
    for backend in (first, second):
        backend.observe_pod(pod(claims=TEMPLATE_CLAIM))
        backend.observe_pod(pod("pod-1", uid="uid-1", claims=TEMPLATE_CLAIM))
    names = [c["metadata"]["name"] for c in template_claims(first)]
    assert names == [c["metadata"]["name"] for c in template_claims(second)]
    assert len(set(names)) == 2


def test_short_generate_name_is_pod_and_claim_with_hyphens() -> None:
    assert generate_name("web-0", "gpu") == "web-0-gpu-"
    base = "p" * 30 + "-" + "c" * 25 + "-"  # exactly 57 characters: kept whole
    assert generate_name("p" * 30, "c" * 25) == base


def test_long_generate_name_is_cut_proportionally_without_trailing_hyphen() -> None:
    # QUIRK (upstream resourceclaim controller): the shortened base has no trailing hyphen.
    pod_name, claim_name = "p" * 60, "c" * 20  # base length 82
    name = generate_name(pod_name, claim_name)
    assert name == "p" * (60 * 57 // 82) + "-" + "c" * (20 * 57 // 82)
    assert len(name) <= 57
    backend = EmbeddedBackend([template()])
    backend.observe_pod(pod(pod_name, claims=[{"name": claim_name, "resourceClaimTemplateName": "gpu-template"}]))
    [created] = template_claims(backend)
    assert created["metadata"]["generateName"] == name
    assert created["metadata"]["name"].startswith(name)
    assert len(created["metadata"]["name"]) == len(name) + 5 <= 63
