"""Node scores for the extender's ``prioritize`` verb, computed from per-node allocation candidates.

Each policy maps the candidates (one ``Allocation`` per node that passed ``filter``) to integer
scores 0..10, the range kube-scheduler accepts from an extender (``MaxExtenderPriority`` = 10):

- ``binpack``: prefer nodes whose devices are already most used, so that whole nodes stay free;
- ``spread``: the opposite, prefer the least used nodes;
- ``prioritized``: upstream 1.35's DynamicResources Score rule (docs/semantics.md §13.5): every firstAvailable
  request whose chosen alternative has index ``i`` adds ``8 - i``; nodes where earlier
  alternatives fit score higher;
- ``topology``: prefer nodes where the devices picked for one claim share a value of a configured
  attribute (a PCIe root, a NUMA node, ...).

A ``ScoringPolicy`` combines them with integer weights (``"binpack=2,topology:gpu.example.com/pcieRoot=1"``);
``score_candidates`` gives each node the weighted average, rounded half up. Everything here is pure
and deterministic: the same candidates always give the same scores, and no node is ever dropped.
Arithmetic is exact (integers, ``Fraction`` where it is rare) so that rounding never depends on float
noise.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import NamedTuple

from extender.core.allocator import Allocation
from extender.core.constraints import comparable_value, lookup_attribute
from extender.core.model import (
    AllocatedState,
    Device,
    DeviceID,
    Features,
    NodeInfo,
)
from extender.core.pools import SliceSnapshot

__all__ = [
    "BINPACK",
    "MAX_SCORE",
    "POLICY_NAMES",
    "PRIORITIZED",
    "SPREAD",
    "TOPOLOGY",
    "DeviceUsage",
    "RawScores",
    "ScoringCandidate",
    "ScoringPolicy",
    "binpack_scores",
    "combine_raw_scores",
    "node_device_usage",
    "normalize_to_max",
    "prioritized_scores",
    "raw_scores",
    "score_candidates",
    "scores_by_value",
    "spread_scores",
    "topology_scores",
]

#: kube-scheduler's MaxExtenderPriority: the highest score an extender may return.
MAX_SCORE = 10
#: FirstAvailableDeviceRequestMaxSize: the prioritized rule adds ``8 - index`` per request.
_FIRST_AVAILABLE_MAX = 8

BINPACK = "binpack"
SPREAD = "spread"
PRIORITIZED = "prioritized"
TOPOLOGY = "topology"
#: The policy names ``ScoringPolicy.parse`` accepts, in the order they are reported.
POLICY_NAMES = (BINPACK, SPREAD, PRIORITIZED, TOPOLOGY)


# --- inputs -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeviceUsage:
    """How many devices a node has in complete, valid pools, and how many of them are in use.

    ``in_use_ids`` names the used devices, so that ``binpack``/``spread`` do not count a device twice
    when this pod takes another share of an already shared device.
    """

    total: int
    in_use: int
    in_use_ids: frozenset[DeviceID] = field(default_factory=frozenset)


class ScoringCandidate(NamedTuple):
    """One node that can run the pod: the allocation the allocator found there, and its usage."""

    allocation: Allocation
    usage: DeviceUsage


def node_device_usage(
    snapshot: SliceSnapshot,
    node: NodeInfo,
    allocated: AllocatedState,
    features: Features,
    *,
    shared_devices: set[DeviceID] | None = None,
) -> DeviceUsage:
    """Count the devices of ``node``'s usable pools and those held by other claims.

    Only complete, valid pools count: the allocator never picks from the others, so they are no
    capacity this node really offers. A device counts as in use when it is exclusively allocated or
    when some claim holds a share of it (``allocated`` should already include in-flight claims).
    """
    if shared_devices is None:  # callers scoring many nodes pass it, computed once
        shared_devices = {shared.device for shared in allocated.shared_ids}
    total = 0
    in_use: set[DeviceID] = set()
    for pool in snapshot.pools_for(node, features):
        if not pool.usable:
            continue
        # ``entries`` already leaves out devices of perDeviceNodeSelection slices that are elsewhere.
        for entry in pool.entries:
            total += 1
            if entry.id in allocated.devices or entry.id in shared_devices:
                in_use.add(entry.id)
    return DeviceUsage(total=total, in_use=len(in_use), in_use_ids=frozenset(in_use))


# --- normalisation ----------------------------------------------------------------------------


def normalize_to_max(raw: Mapping[str, Fraction | int]) -> dict[str, int]:
    """Scale raw scores so that the best node gets ``MAX_SCORE``, the others proportionally.

    The same rule as kube-scheduler's default normaliser (``score * max / highest``, rounded down);
    when every raw score is zero (or negative) every node gets zero.
    """
    highest = max(raw.values(), default=0)
    if highest <= 0:
        return dict.fromkeys(raw, 0)
    # floor(value * MAX_SCORE / highest) on numerators and denominators: exact, and without
    # creating a Fraction per node (ints have numerator/denominator too).
    top_num, top_den = highest.numerator, highest.denominator
    return {
        node: max(0, (value.numerator * MAX_SCORE * top_den) // (value.denominator * top_num))
        for node, value in raw.items()
    }


def _round_half_up(value: Fraction) -> int:
    return _divide_half_up(value.numerator, value.denominator)


def _divide_half_up(numerator: int, denominator: int) -> int:
    """numerator / denominator rounded half up, in integers (denominator > 0)."""
    return (2 * numerator + denominator) // (2 * denominator)


# --- policies ---------------------------------------------------------------------------------


def _used_fraction(candidate: ScoringCandidate) -> tuple[int, int]:
    """Share of the node's devices in use once this pod's allocation is added, as (used, total)
    with total > 0 (exact, and cheaper than a Fraction per node).

    Admin-access results do not consume a device (docs/semantics.md §15); a device this pod takes that is already
    in use (another share of a shared device) is not counted twice.
    """
    usage = candidate.usage
    if usage.total <= 0:
        return 0, 1
    in_use = usage.in_use_ids
    consumed = candidate.allocation.consumed_devices
    if len(consumed) == 1:  # the common pod: one device
        newly_used = 0 if consumed[0] in in_use else 1
    else:
        newly_used = len({device for device in consumed if device not in in_use})
    return min(usage.total, usage.in_use + newly_used), usage.total


def _normalize_ratios(raw: Mapping[str, tuple[int, int]]) -> dict[str, int]:
    """``normalize_to_max`` for values given as (numerator, denominator > 0) pairs."""
    top_num, top_den = 0, 1
    for num, den in raw.values():
        if num * top_den > top_num * den:
            top_num, top_den = num, den
    if top_num <= 0:
        return dict.fromkeys(raw, 0)
    scale_num, scale_den = MAX_SCORE * top_den, top_num
    return {node: max(0, (num * scale_num) // (den * scale_den)) for node, (num, den) in raw.items()}


def binpack_scores(candidates: Sequence[ScoringCandidate]) -> dict[str, int]:
    """Most used after this pod's allocation scores highest."""
    return _normalize_ratios({c.allocation.node: _used_fraction(c) for c in candidates})


def spread_scores(candidates: Sequence[ScoringCandidate]) -> dict[str, int]:
    """Least used after this pod's allocation scores highest.

    A node without devices counts as entirely free: nothing there is being packed.
    """
    free: dict[str, tuple[int, int]] = {}
    for c in candidates:
        used, total = _used_fraction(c)
        free[c.allocation.node] = (total - used, total)
    return _normalize_ratios(free)


def prioritized_scores(candidates: Sequence[ScoringCandidate]) -> dict[str, int]:
    """Upstream's Score rule for firstAvailable requests (docs/semantics.md §13.5), normalised to 0..10.

    QUIRK (§13.5): upstream pairs all of the pod's claims with the results of only the claims it
    allocated. We follow the spec's recommendation: ``chosen_subrequests`` covers exactly the claims
    allocated in this cycle, and only those are walked, so pre-allocated claims can neither shift
    indices nor cause an error.
    """
    return normalize_to_max({c.allocation.node: _prioritized_raw(c) for c in candidates})


def _prioritized_raw(candidate: ScoringCandidate) -> int:
    total = 0
    for per_claim in candidate.allocation.chosen_subrequests:
        for index in per_claim:
            if index is not None:
                total += _FIRST_AVAILABLE_MAX - index
    return total


def topology_scores(candidates: Sequence[ScoringCandidate], attribute: str) -> dict[str, int]:
    """How concentrated each claim's picked devices are on one value of ``attribute``.

    Per claim with ``n`` devices showing ``k`` distinct values (a device without the attribute
    counts as a value of its own), ``n - k`` of the ``n - 1`` possible "same as another device"
    links are present. Summing over claims, a node scores ``10 * links / possible``: 10 when each
    claim sits on one value, 0 when every device differs. Claims with one device add nothing to
    either side, so a pod with only such claims scores 10 everywhere (neutral). The score is not
    normalised across nodes: it is already an absolute measure.
    """
    return {c.allocation.node: _topology_score(c, attribute) for c in candidates}


def _topology_score(candidate: ScoringCandidate, attribute: str) -> int:
    present = 0
    possible = 0
    allocation = candidate.allocation
    for ids, devices in zip(allocation.picked_ids, allocation.picked, strict=True):
        drivers = [device_id.driver for device_id in ids]
        if len(devices) < 2:
            continue
        distinct = _distinct_values(attribute, devices, drivers)
        present += len(devices) - distinct
        possible += len(devices) - 1
    fraction = Fraction(1) if possible == 0 else Fraction(present, possible)
    return _round_half_up(fraction * MAX_SCORE)


def _distinct_values(attribute: str, devices: Sequence[Device], drivers: Sequence[str]) -> int:
    """Distinct values among the devices; each device lacking the attribute is a value of its own."""
    domain, _, ident = attribute.partition("/")
    seen: set[tuple[type, object]] = set()
    missing = 0
    for device, driver in zip(devices, drivers, strict=True):
        # The lookup constraints use (docs/semantics.md §8): exact key, else the bare id in the driver's domain.
        value = lookup_attribute(device, domain, ident, attribute, driver)
        if value is None:
            missing += 1
        else:
            seen.add(comparable_value(value))
    return len(seen) + missing


# --- combination ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScoringPolicy:
    """Policy name -> integer weight (0 disables a policy), plus the topology attribute.

    ``weights`` keeps the order the policies were given in; ``str(policy)`` gives text that
    ``parse`` reads back.
    """

    weights: Mapping[str, int]
    topology_attribute: str | None = None

    def __post_init__(self) -> None:
        for name, weight in self.weights.items():
            if name not in POLICY_NAMES:
                raise ValueError(f"unknown scoring policy {name!r}; known: {', '.join(POLICY_NAMES)}")
            if type(weight) is not int or weight < 0:
                raise ValueError(f"scoring policy {name}: weight must be an integer >= 0, not {weight!r}")
        if TOPOLOGY in self.weights and not self.topology_attribute:
            raise ValueError("scoring policy topology needs an attribute: topology:<domain>/<name>=<weight>")
        if self.topology_attribute is not None:
            _check_attribute_name(self.topology_attribute)

    @classmethod
    def parse(cls, text: str) -> ScoringPolicy:
        """Read ``name[=weight]`` items separated by commas; a missing weight means 1.

        ``topology`` takes its attribute after a colon: ``topology:gpu.example.com/pcieRoot=1``.
        Empty text is an empty policy (every node scores 0).
        """
        weights: dict[str, int] = {}
        attribute: str | None = None
        for raw_item in text.split(","):
            item = raw_item.strip()
            if not item:
                if text.strip():
                    raise ValueError(f"scoring policy {text!r}: empty item")
                continue
            spec, has_weight, raw_weight = item.partition("=")
            name, has_argument, argument = spec.strip().partition(":")
            name = name.strip()
            if name not in POLICY_NAMES:
                known = ", ".join(POLICY_NAMES)
                raise ValueError(f"unknown scoring policy {name!r} in {item!r}; known: {known}")
            if name in weights:
                raise ValueError(f"scoring policy {name} given twice")
            if name == TOPOLOGY:
                if not has_argument or not argument.strip():
                    raise ValueError(
                        f"scoring policy {item!r}: topology needs an attribute, "
                        "e.g. topology:gpu.example.com/pcieRoot=1"
                    )
                attribute = argument.strip()
            elif has_argument:
                raise ValueError(f"scoring policy {item!r}: {name} takes no argument")
            weights[name] = _parse_weight(name, raw_weight.strip()) if has_weight else 1
        return cls(weights=weights, topology_attribute=attribute)

    def __str__(self) -> str:
        items = []
        for name, weight in self.weights.items():
            label = f"{TOPOLOGY}:{self.topology_attribute}" if name == TOPOLOGY else name
            items.append(f"{label}={weight}")
        return ",".join(items)


def _parse_weight(name: str, text: str) -> int:
    if not text.isdigit():  # also rejects "-1", "1.5", "" and "+2"
        raise ValueError(f"scoring policy {name}: weight must be an integer >= 0, not {text!r}")
    return int(text)


def _check_attribute_name(name: str) -> None:
    domain, _, ident = name.partition("/")
    if not domain or not ident or "/" in ident:
        raise ValueError(f"topology attribute {name!r} must be fully qualified: <domain>/<name>")


class RawScores(NamedTuple):
    """What one candidate alone determines of its scores, before normalisation across nodes.
    It depends only on the node's allocation and usage, so callers may remember it per node."""

    used: int  # binpack / spread: devices in use once this pod is added, of ``total`` (> 0)
    total: int
    prioritized: int  # the sum of ``8 - index`` over firstAvailable requests
    topology: int  # 0..10 for the policy's topology attribute; 0 without one


def raw_scores(candidate: ScoringCandidate, topology_attribute: str | None = None) -> RawScores:
    used, total = _used_fraction(candidate)
    topology = _topology_score(candidate, topology_attribute) if topology_attribute is not None else 0
    return RawScores(used, total, _prioritized_raw(candidate), topology)


def score_candidates(candidates: Sequence[ScoringCandidate], policy: ScoringPolicy) -> dict[str, int]:
    """Each node's weighted average of the policies' 0..10 scores, rounded half up to 0..10.

    Every candidate gets a score (0 when the policy is empty or all weights are 0); empty input
    gives ``{}``. Raises ValueError when two candidates name the same node.
    """
    nodes = [candidate.allocation.node for candidate in candidates]
    if len(set(nodes)) != len(nodes):
        duplicates = sorted({node for node in nodes if nodes.count(node) > 1})
        raise ValueError(f"score_candidates: node(s) given twice: {', '.join(duplicates)}")
    attribute = policy.topology_attribute if policy.weights.get(TOPOLOGY) else None
    return combine_raw_scores({c.allocation.node: raw_scores(c, attribute) for c in candidates}, policy)


def combine_raw_scores(raw: Mapping[str, RawScores], policy: ScoringPolicy) -> dict[str, int]:
    """``score_candidates`` from each node's ``RawScores`` (computed with the policy's topology
    attribute when topology has a weight).

    A node's score depends only on its own raw scores and on the best raw value of each policy, so
    it is computed once per distinct ``RawScores`` (nodes of one kind share a handful of them) and
    looked up for every node. The arithmetic is that of ``_normalize_ratios`` / ``normalize_to_max``
    and ``_divide_half_up``, inlined because prioritize runs it for every fitting node.
    """
    if not raw:
        return {}
    per_value = scores_by_value(set(raw.values()), policy)
    return {node: per_value[scores] for node, scores in raw.items()}


def scores_by_value(values: Collection[RawScores], policy: ScoringPolicy) -> dict[RawScores, int]:
    """The 0..10 score of each distinct ``RawScores`` when ``values`` are all the candidates' raw
    scores (the best value of each policy is taken over them): ``combine_raw_scores`` per value."""
    weights = policy.weights
    total_weight = sum(weights.values())
    if total_weight == 0:
        return dict.fromkeys(values, 0)
    w_binpack, w_spread = weights.get(BINPACK, 0), weights.get(SPREAD, 0)
    w_prioritized, w_topology = weights.get(PRIORITIZED, 0), weights.get(TOPOLOGY, 0)
    # best ratios as (numerator, denominator); best prioritized sum
    bin_num, bin_den, spread_num, spread_den, best_prioritized = 0, 1, 0, 1, 0
    for used, total, prioritized, _ in values:
        if used * bin_den > bin_num * total:
            bin_num, bin_den = used, total
        free = total - used
        if free * spread_den > spread_num * total:
            spread_num, spread_den = free, total
        if prioritized > best_prioritized:
            best_prioritized = prioritized
    if bin_num <= 0:
        w_binpack = 0  # every node scores 0 for it
    if spread_num <= 0:
        w_spread = 0
    if best_prioritized <= 0:
        w_prioritized = 0
    bin_scale, spread_scale = MAX_SCORE * bin_den, MAX_SCORE * spread_den
    double_weight = 2 * total_weight
    out: dict[RawScores, int] = {}
    for value in values:
        used, total, prioritized, topology = value
        weighted = w_topology * topology
        if w_binpack:
            weighted += w_binpack * ((used * bin_scale) // (total * bin_num))
        if w_spread:
            weighted += w_spread * (((total - used) * spread_scale) // (total * spread_num))
        if w_prioritized:
            weighted += w_prioritized * ((prioritized * MAX_SCORE) // best_prioritized)
        out[value] = (2 * weighted + total_weight) // double_weight
    return out
