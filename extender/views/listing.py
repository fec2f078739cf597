"""The raw objects the extender holds, as one ``kind: List`` (``GET debug/objects``).

``kubectl dra simulate --extender URL`` rebuilds the cluster from it. A backend that keeps every
object as it came (the embedded one: ``list_objects(kind)``) gives them whole. Otherwise the
store gives what it keeps: claims, templates and pods raw; nodes as their name and labels (all the
extender reads of a Node); DeviceClasses and ResourceSlices through the backend's
``list_objects`` (the kube backend asks the API server for them with one LIST each; its
``list_objects`` answers None for the kinds it leaves to the store), else not at all, which
``incomplete`` then names.

DeviceClasses, ResourceSlices, ResourceClaims and ResourceClaimTemplates are answered as
resource.k8s.io/v1 whatever version they are held in (``extender.core.convert``'s ``*_to_v1``),
except what has no faithful v1 form (``views.debug.without_v1_form``: classic DRA claims and
templates, v1alpha3 classes with ``suitableNodes``), which stays as held, as in
``debug/resourceclaims``; an object no converter accepts also stays as held.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from typing import Any

from extender.core.convert import (
    device_class_to_v1,
    resource_claim_template_to_v1,
    resource_claim_to_v1,
    resource_slice_to_v1,
)
from extender.core.errors import InvalidObject
from extender.state.backend import Backend
from extender.state.cooperative import Pacer
from extender.views.debug import without_v1_form

__all__ = ["LISTED_KINDS", "held_objects"]

#: How long ``held_objects`` copies before it lets the event loop run.
SLICE_SECONDS = 0.01

#: The kinds listed, in the order a cluster is best rebuilt from them.
LISTED_KINDS = ("Node", "DeviceClass", "ResourceSlice", "ResourceClaimTemplate", "ResourceClaim", "Pod")

_TO_V1: dict[str, Callable[..., dict[str, Any]]] = {
    "DeviceClass": device_class_to_v1,
    "ResourceSlice": resource_slice_to_v1,
    "ResourceClaimTemplate": resource_claim_template_to_v1,
    "ResourceClaim": resource_claim_to_v1,
}


async def held_objects(backend: Backend, *, slice_seconds: float = SLICE_SECONDS) -> dict[str, Any]:
    """A ``v1`` ``List`` of the objects of ``LISTED_KINDS``; ``metadata.incomplete`` names the kinds
    that could not be given whole (left out). Copying and converting every object of a big
    cluster takes a while: the event loop runs after each ``slice_seconds`` of it, and each kind is
    read from a list of the store's objects taken at once (a watch event may change the store
    meanwhile; the answer is then a mix of before and after, as any LIST of several kinds is)."""
    store = backend.store
    lister = getattr(backend, "list_objects", None)
    items: list[dict[str, Any]] = []
    incomplete: list[str] = []
    pace = Pacer(slice_seconds)
    for kind in LISTED_KINDS:
        if lister is not None:
            listed = lister(kind)
            if inspect.isawaitable(listed):
                listed = await listed
            if listed is not None:  # None: the backend leaves the kind to the store
                for obj in listed:
                    items.append(_answered(kind, {**obj, "kind": kind}))
                    await pace()
                continue
        if kind == "Node":
            items += [
                {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node.name, "labels": dict(node.labels)}}
                for node in list(store.nodes.values())
            ]
        elif kind in ("ResourceClaim", "ResourceClaimTemplate"):
            held = store.raw_claims if kind == "ResourceClaim" else store.raw_templates
            for raw in list(held.values()):
                items.append(_answered(kind, raw))
                await pace()
        elif kind == "Pod":
            for raw in list(store.pods.values()):
                items.append(copy.deepcopy(raw))
                await pace()
        else:
            incomplete.append(kind)
    out: dict[str, Any] = {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items}
    if incomplete:
        out["metadata"]["incomplete"] = incomplete
    return out


def _answered(kind: str, raw: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``raw`` as the list answers it: resource.k8s.io/v1 where it has a v1 form (kinds
    without a converter are returned as they are, for the caller to copy)."""
    convert = _TO_V1.get(kind)
    if convert is None:
        return raw
    if not without_v1_form(kind, raw):
        try:
            return convert(raw)
        except InvalidObject:
            pass  # not a version or shape the converters know: as held
    return copy.deepcopy(raw)
