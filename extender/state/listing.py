"""The raw objects the extender holds, as one ``kind: List`` (``GET debug/objects``).

``kubectl dra simulate --extender URL`` rebuilds the cluster from it. A backend that keeps every
object as it came (the embedded one: ``list_objects(kind)``) gives them whole. Otherwise the
store gives what it keeps: claims, templates and pods raw; nodes as their name and labels (all the
extender reads of a Node); DeviceClasses and ResourceSlices through the backend's
``list_objects`` when it has one (the kube backend lists them from the API server), else not at
all, which ``incomplete`` then names.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

from extender.state.backend import Backend

__all__ = ["LISTED_KINDS", "held_objects"]

#: The kinds listed, in the order a cluster is best rebuilt from them.
LISTED_KINDS = ("Node", "DeviceClass", "ResourceSlice", "ResourceClaimTemplate", "ResourceClaim", "Pod")


async def held_objects(backend: Backend) -> dict[str, Any]:
    """A ``v1`` ``List`` of the objects of ``LISTED_KINDS``; ``metadata.incomplete`` names the kinds
    that could not be given whole (left out)."""
    store = backend.store
    lister = getattr(backend, "list_objects", None)
    items: list[dict[str, Any]] = []
    incomplete: list[str] = []
    for kind in LISTED_KINDS:
        if lister is not None:
            listed = lister(kind)
            if inspect.isawaitable(listed):
                listed = await listed
            items += [{**obj, "kind": kind} for obj in listed]
            continue
        if kind == "Node":
            items += [
                {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node.name, "labels": dict(node.labels)}}
                for node in store.nodes.values()
            ]
        elif kind == "ResourceClaim":
            items += [copy.deepcopy(raw) for raw in store.raw_claims.values()]
        elif kind == "ResourceClaimTemplate":
            items += [copy.deepcopy(raw) for raw in store.raw_templates.values()]
        elif kind == "Pod":
            items += [copy.deepcopy(raw) for raw in store.pods.values()]
        else:
            incomplete.append(kind)
    out: dict[str, Any] = {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items}
    if incomplete:
        out["metadata"]["incomplete"] = incomplete
    return out
