"""Gangs as the store shows them: each pod's PodGroup, the group's members, and which of them are
placed already (spec/workloads-and-gangs.md §7.1).

kube-scheduler tells an extender nothing about a gang (§4: no minCount, no other members, no sign of
which pass a call belongs to), so the service reads it all from the watched PodGroups and pods:

- ``group_of(pod)``: the pod's PodGroup, or None (no ``spec.schedulingGroup``, the group not seen
  yet, or PodGroups not served / switched off: ``Backend.pod_groups``);
- ``members(group)``: its pods, sorted into *waiting* (not bound, not being deleted, not finished:
  what a pass places) and *placed* (bound, or with a bind running here, and not finished: what
  counts toward ``minCount`` already).
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from dataclasses import dataclass, field
from typing import Any

from extender.core.podgroups import PodGroup
from extender.state.backend import Backend
from extender.state.cache.pods import bound_node, deleting, finished, pod_group_name, pod_identity, pod_uid

__all__ = ["GangMembers", "Gangs"]


@dataclass(slots=True)
class GangMembers:
    """A PodGroup's pods, by state, each list in pod-key order."""

    group: PodGroup
    #: Not bound, not being deleted, not finished: the members a pass places.
    waiting: list[Mapping[str, Any]] = field(default_factory=list)
    #: Bound (or being bound by this extender) and not finished: they count toward ``minCount``.
    placed: list[Mapping[str, Any]] = field(default_factory=list)

    @property
    def need(self) -> int:
        """How many waiting members must be placed together for the gang to run (0 for a basic
        group, or a gang whose placed members reach ``minCount`` already)."""
        if self.group.min_count is None:
            return 0
        return max(0, self.group.min_count - len(self.placed))


class Gangs:
    """See the module docstring. ``binding``: UIDs of pods whose bind is running here."""

    def __init__(self, backend: Backend, *, binding: Container[str] = ()) -> None:
        self.backend = backend
        self.store = backend.store
        self.binding = binding

    @property
    def enabled(self) -> bool:
        return self.backend.pod_groups == ""

    def group_of(self, pod: Mapping[str, Any]) -> PodGroup | None:
        """The pod's PodGroup as the store shows it, or None (see the module docstring)."""
        name = pod_group_name(pod)
        if not name or not self.enabled:
            return None
        namespace, _, _ = pod_identity(pod)
        return self.store.pod_groups.get(f"{namespace}/{name}")

    def members(self, group: PodGroup) -> GangMembers:
        """The group's pods as the store shows them now (the pod of a request may be newer: callers
        put theirs in place of the stored one)."""
        out = GangMembers(group)
        for key in sorted(self.store.group_pods.get(group.key, ())):
            pod = self.store.pods.get(key)
            if pod is None or finished(pod):
                continue
            if bound_node(pod) or pod_uid(pod) in self.binding:
                out.placed.append(pod)
            elif not deleting(pod):
                out.waiting.append(pod)
        return out
