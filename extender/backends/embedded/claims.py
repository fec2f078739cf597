"""The resourceclaim controller's claim creation, as the embedded cluster plays it.

For every pod claim that names a ResourceClaimTemplate and has no entry in the pod's
``status.resourceClaimStatuses``, the controller (kube-controller-manager,
docs/semantics.md §13.8) reuses a claim already owned by the pod for that pod claim (one it
created before failing to update the pod's status), or else creates one from the template, and
then records the claim's name in the pod status. These are the pure parts: which pod claims need
work, finding the owned claim, and building the new claim; ``cluster.py`` does the writes.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

from .objects import copy_object

__all__ = [
    "NAME_ALPHABET",
    "POD_CLAIM_NAME_ANNOTATION",
    "claim_from_template",
    "find_pod_claim",
    "generate_name",
    "is_controlled_by",
    "pending_template_claims",
    "random_suffix",
]

POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
#: utilrand.String's alphabet (lowercase alphanumerics without vowels and 0, 1, 3), as the
#: apiserver uses for generateName suffixes.
NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_MAX_BASE_LEN = 57  # 63 minus a hyphen and the 5 random characters


def pending_template_claims(pod: dict[str, Any]) -> list[tuple[str, str]]:
    """(podClaimName, templateName) for the pod's template claims without a status entry yet.
    A pod being deleted gets no new claims (the controller skips it)."""
    meta = pod.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return []
    recorded = {
        entry.get("name")
        for entry in (pod.get("status") or {}).get("resourceClaimStatuses") or ()
        if isinstance(entry, dict)
    }
    pending = []
    for entry in (pod.get("spec") or {}).get("resourceClaims") or ():
        if not isinstance(entry, dict):
            continue
        name, template = entry.get("name"), entry.get("resourceClaimTemplateName")
        if isinstance(name, str) and name and isinstance(template, str) and template and name not in recorded:
            pending.append((name, template))
    return pending


def generate_name(pod_name: str, pod_claim_name: str) -> str:
    """The claim's ``generateName``: ``<pod>-<podClaimName>-``, or, when that is longer than 57
    characters, both parts cut in proportion to their length.

    QUIRK (upstream): the shortened form has no trailing hyphen (``<pod part>-<claim part>``), so
    the random suffix is glued to the claim part; we keep that, as names must match upstream's.
    """
    base = f"{pod_name}-{pod_claim_name}-"
    if len(base) <= _MAX_BASE_LEN:
        return base
    pod_part = pod_name[: len(pod_name) * _MAX_BASE_LEN // len(base)]
    claim_part = pod_claim_name[: len(pod_claim_name) * _MAX_BASE_LEN // len(base)]
    return f"{pod_part}-{claim_part}"


def random_suffix(rng: random.Random, length: int = 5) -> str:
    return "".join(rng.choice(NAME_ALPHABET) for _ in range(length))


def is_controlled_by(claim: dict[str, Any], pod_uid: str) -> bool:
    """Whether the claim's controller owner reference is this pod (the controller's owner index)."""
    for owner in (claim.get("metadata") or {}).get("ownerReferences") or ():
        if (
            isinstance(owner, dict)
            and owner.get("controller") is True
            and owner.get("apiVersion") == "v1"
            and owner.get("kind") == "Pod"
            and owner.get("uid") == pod_uid
        ):
            return True
    return False


def find_pod_claim(claims: Iterable[dict[str, Any]], pod_uid: str, pod_claim_name: str) -> dict[str, Any] | None:
    """The first claim (in the order given) controlled by the pod and annotated with this pod
    claim name; ``claims`` should be the pod's namespace only."""
    for claim in claims:
        annotations = (claim.get("metadata") or {}).get("annotations") or {}
        if annotations.get(POD_CLAIM_NAME_ANNOTATION) == pod_claim_name and is_controlled_by(claim, pod_uid):
            return claim
    return None


def claim_from_template(
    template: dict[str, Any], pod: dict[str, Any], pod_claim_name: str, name: str
) -> dict[str, Any]:
    """A new claim named ``name`` for the pod claim, built from the template (raw dicts)."""
    pod_meta = pod.get("metadata") or {}
    claim_meta = (template.get("spec") or {}).get("metadata") or {}
    annotations = dict(claim_meta.get("annotations") or {})
    annotations[POD_CLAIM_NAME_ANNOTATION] = pod_claim_name
    metadata: dict[str, Any] = {
        "name": name,
        "generateName": generate_name(pod_meta["name"], pod_claim_name),
        "namespace": pod_meta.get("namespace") or "default",
        "ownerReferences": [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod_meta["name"],
                "uid": pod_meta.get("uid") or "",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
        "annotations": annotations,
    }
    if claim_meta.get("labels"):
        metadata["labels"] = dict(claim_meta["labels"])
    return {
        "apiVersion": template.get("apiVersion"),
        "kind": "ResourceClaim",
        "metadata": metadata,
        "spec": copy_object((template.get("spec") or {}).get("spec") or {}),
    }
