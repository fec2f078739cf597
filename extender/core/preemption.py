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
- ``choose_units``: the same reprieve over *units* for a gang (spec/workloads-and-gangs.md §7.8): a
  unit is one pod, or every pod of a PodGroup whose disruption mode is all-or-nothing (KEP-5710), and
  a unit goes whole or not at all;
- ``better_plan``: kube-scheduler's ranking of candidate nodes (fewest PDB violations, then the
  lowest priority of the most important victim, the lowest sum of priorities, the fewest victims,
  the latest start of the most important victims).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from extender.core.model import ResourceClaim

__all__ = [
    "Budget",
    "Plan",
    "Victim",
    "VictimUnit",
    "being_freed",
    "better_plan",
    "by_importance",
    "choose_units",
    "choose_victims",
    "label_selector_matches",
    "protected_victims",
    "released",
]


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


def being_freed(claim: ResourceClaim | None, holding: Collection[str]) -> bool:
    """Whether ``claim``, one a preemption's victims held, is still to be deallocated: allocated,
    and none of its consumers a holder: a pod in ``holding`` (the UIDs of pods that keep their
    claims: not deleted, not finished), or anything but a pod (a PodGroup). The resourceclaim
    controller has yet to drop the others. A claim that a running pod (or a PodGroup) reserved
    since stays allocated for it: it is not coming back, and waiting for it would last until the
    nomination ends."""
    if claim is None or claim.allocation is None:
        return False
    return all(ref.resource == "pods" and not ref.api_group and ref.uid not in holding for ref in claim.reserved_for)


def choose_victims(
    fits: Callable[[frozenset[str]], bool], candidates: Sequence[Victim], *, protected: Collection[str] = ()
) -> list[Victim] | None:
    """The victims to remove, most important first, or None if removing all candidates does not
    make the pod fit. ``fits`` is asked with sets of victim UIDs. ``protected``: UIDs whose
    eviction would violate a PodDisruptionBudget; they are reprieved first (kube-scheduler's
    SelectVictimsOnNode), so that they go only when nothing else will do."""
    chosen = {v.uid: v for v in candidates}
    if not chosen or not fits(frozenset(chosen)):
        return None
    ordered = by_importance(candidates)
    for victim in [v for v in ordered if v.uid in protected] + [v for v in ordered if v.uid not in protected]:
        if fits(frozenset(uid for uid in chosen if uid != victim.uid)):
            del chosen[victim.uid]
    # nobody left: the pod fits without removing anyone (nothing for preemption to do)
    return by_importance(chosen.values()) if chosen else None


@dataclass(frozen=True, slots=True)
class VictimUnit:
    """Pods that are evicted together or not at all: one pod, or the running pods of a PodGroup
    whose disruption mode is all-or-nothing (``group`` names it). ``victims`` most important
    first; ``nodes``: where they run."""

    victims: tuple[Victim, ...]
    nodes: frozenset[str] = frozenset()
    group: str = ""

    @property
    def key(self) -> str:
        """Tells units apart: the PodGroup's key, else the one pod's UID."""
        return f"podgroup:{self.group}" if self.group else self.victims[0].uid

    @property
    def uids(self) -> frozenset[str]:
        return frozenset(v.uid for v in self.victims)

    def importance(self) -> tuple[int, str, str]:
        """Sorts most important first, by the unit's most important pod (``by_importance``)."""
        top = self.victims[0]
        return (-top.priority, top.start_time or "\uffff", top.key)


def choose_units(
    fits: Callable[[frozenset[str]], bool], units: Sequence[VictimUnit], *, protected: Collection[str] = ()
) -> list[VictimUnit] | None:
    """``choose_victims`` over units: the units to remove (most important first), or None if
    removing all of them is not enough. ``fits`` is asked with sets of pod UIDs; ``protected``:
    keys of units a PodDisruptionBudget protects (reprieved first). One pass suffices for the same
    reason as there (what a set frees only grows with the set): the result is irreducible, no unit
    of it can be spared."""
    chosen = {u.key: u for u in units}
    if not chosen or not fits(_uids(chosen.values())):
        return None
    ordered = sorted(units, key=VictimUnit.importance)
    for unit in [u for u in ordered if u.key in protected] + [u for u in ordered if u.key not in protected]:
        if fits(_uids(u for key, u in chosen.items() if key != unit.key)):
            del chosen[unit.key]
    return sorted(chosen.values(), key=VictimUnit.importance) if chosen else None


def _uids(units: Iterable[VictimUnit]) -> frozenset[str]:
    return frozenset(uid for unit in units for uid in unit.uids)


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


@dataclass(frozen=True, slots=True)
class Budget:
    """A PodDisruptionBudget as the choice reads it: its namespace, its selector (``matchLabels``
    and ``matchExpressions``; None selects nothing, as kube-scheduler 1.36 reads it) and the
    disruptions it still allows (``status.disruptionsAllowed``)."""

    namespace: str
    name: str
    selector: Mapping[str, object] | None
    allowed: int


def label_selector_matches(selector: Mapping[str, object] | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector against labels; an empty or missing selector matches nothing here."""
    if not selector:
        return False
    match_labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not match_labels and not expressions:
        return False
    if isinstance(match_labels, Mapping) and any(labels.get(k) != v for k, v in match_labels.items()):
        return False
    for expression in expressions if isinstance(expressions, list) else ():
        if not isinstance(expression, Mapping):
            return False
        key, operator = expression.get("key"), expression.get("operator")
        values = expression.get("values") or []
        present = key in labels
        if operator == "In" and not (present and labels[str(key)] in values):
            return False
        if operator == "NotIn" and present and labels[str(key)] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def protected_victims(
    victims: Sequence[Victim], budgets: Sequence[Budget], labels: Mapping[str, Mapping[str, str]]
) -> set[str]:
    """UIDs among ``victims`` whose eviction would violate a budget, the disruptions each budget
    allows consumed in importance order (kube-scheduler's filterPodsWithPDBViolation).
    ``labels``: pod UID -> its labels."""
    left = {(b.namespace, b.name): b.allowed for b in budgets}
    violating: set[str] = set()
    for victim in by_importance(victims):
        pod_labels = labels.get(victim.uid, {})
        for budget in budgets:
            if budget.namespace != victim.namespace or not label_selector_matches(budget.selector, pod_labels):
                continue
            key = (budget.namespace, budget.name)
            left[key] -= 1
            if left[key] < 0:
                violating.add(victim.uid)
    return violating
