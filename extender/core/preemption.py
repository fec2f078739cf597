"""Device-aware preemption as pure decisions (spec/preemption.md §2.4, §2.6).

kube-scheduler's own preemption never helps a pod whose only shortage is devices (§2.0: its dry
run uses in-tree filters only), so the extender chooses victims itself. This module holds the
choice, with no I/O:

- ``Victim``: a running pod of lower priority on the node, with the claims it consumes;
- ``released``: which claims a set of removed pods frees (§2.4: a claim frees its devices only
  when every consumer in ``reservedFor`` is gone; a claim reserved for nobody, when the pod that
  owns it goes; one with a consumer that is not a pod, never);
- ``choose_victims``: given ``fits(removed)`` (one allocator run with the claims of ``removed``
  freed), start from every candidate and reprieve them one by one, most important first (as
  kube-scheduler's SelectVictimsOnNode does). One pass suffices: what a set frees only grows with
  the set, so a victim that could not be spared stays necessary; the result is irreducible
  (sparing any one victim breaks the fit), though not necessarily the smallest;
- ``better_plan``: kube-scheduler's ranking of candidate nodes (fewest PDB violations, then the
  lowest priority of the most important victim, the lowest sum of priorities, the fewest victims,
  the latest start of the most important victims).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from extender.core.model import ResourceClaim

__all__ = ["Plan", "Victim", "better_plan", "by_importance", "choose_victims", "released"]


@dataclass(frozen=True, slots=True)
class Victim:
    """A pod preemption could remove: ``priority`` as admission resolved it (``spec.priority``),
    ``start_time`` as RFC 3339 text ("" if unknown, the least important of equals)."""

    namespace: str
    name: str
    uid: str
    priority: int
    start_time: str = ""
    #: keys of the claims it consumes (in their ``reservedFor``)
    claims: tuple[str, ...] = ()
    #: its ``terminationGracePeriodSeconds`` (the default 30 when unset)
    grace_seconds: float = 30.0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def by_importance(victims: Iterable[Victim]) -> list[Victim]:
    """Most important first: higher priority, then the earlier start (kube-scheduler's
    ``MoreImportantPod``); a pod with no start time counts as started last."""
    return sorted(victims, key=lambda v: (-v.priority, v.start_time or "\uffff", v.key))


def released(
    removed: Collection[str],
    claims: Mapping[str, ResourceClaim],
    owners: Mapping[str, str],
    candidates: Iterable[str],
) -> set[str]:
    """Keys among ``candidates`` of the allocated claims that removing the pods with UIDs
    ``removed`` frees. ``owners``: claim key -> UID of its controlling pod (template claims)."""
    freed: set[str] = set()
    for key in candidates:
        claim = claims.get(key)
        if claim is None or claim.allocation is None:
            continue
        consumers = claim.reserved_for
        if consumers:
            if all(ref.resource == "pods" and not ref.api_group and ref.uid in removed for ref in consumers):
                freed.add(key)
        elif owners.get(key) in removed:
            freed.add(key)
    return freed


def choose_victims(fits: Callable[[frozenset[str]], bool], candidates: Sequence[Victim]) -> list[Victim] | None:
    """The victims to remove, most important first, or None if removing all candidates does not
    make the pod fit. ``fits`` is asked with sets of victim UIDs."""
    chosen = {v.uid: v for v in candidates}
    if not chosen or not fits(frozenset(chosen)):
        return None
    for victim in by_importance(candidates):
        if fits(frozenset(uid for uid in chosen if uid != victim.uid)):
            del chosen[victim.uid]
    # nobody left: the pod fits without removing anyone (nothing for preemption to do)
    return by_importance(chosen.values()) if chosen else None


@dataclass(frozen=True, slots=True)
class Plan:
    """Victims on one node (most important first) and how many of them violate a PDB."""

    node: str
    victims: tuple[Victim, ...]
    pdb_violations: int = 0

    def rank(self) -> tuple[int, int, int, int, str]:
        """Lower is better, in kube-scheduler's ``pickOneNodeForPreemption`` order; the last
        element prefers the latest start of the most important victim (negated by inverting)."""
        top = self.victims[0]
        total = sum(v.priority + 2**31 for v in self.victims)  # shifted, as upstream, so all are positive
        latest = "".join(chr(0x10FFFF - ord(c)) for c in (top.start_time or ""))
        return (self.pdb_violations, top.priority, total, len(self.victims), latest)


def better_plan(plans: Iterable[Plan]) -> Plan | None:
    """The plan kube-scheduler would pick among these (the first of equals)."""
    best: Plan | None = None
    for plan in plans:
        if best is None or plan.rank() < best.rank():
            best = plan
    return best
