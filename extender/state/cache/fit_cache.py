"""Remembered per-node verdicts: what the allocator decided for a pod shape on a node, kept until
one of its inputs changes.

A filter asks the same question of every node, and the next pod usually asks it again: most pods
are made from a handful of claim templates, and between two scheduling cycles a bind changes one
node. So the verdict for a *pod shape* on a node — the claims' specs (``ObjectStore.claim_specs``)
plus the node selectors of the pod's already-allocated claims — is kept and reused until it may be
stale. The allocator's outcome on a node depends on nothing else than:

- the node's view: its pools and devices, the selector verdicts on them (slices and node labels);
- the allocated state of the devices of those pools (shared counters are pool-wide);
- the DeviceClasses and the feature gates (fixed per service).

Invalidation is pushed, exactly, by whoever sees a change: the ``ObjectStore`` drops the nodes whose
views a slice change replaced (``SliceSnapshot.invalidated``), a node whose labels changed,
everything on a DeviceClass change, and the nodes that depend on a pool when an allocation in it
changes: a claim's, or an in-flight ledger entry's (``ObjectStore.set_in_flight``). Nodes register
the pools their verdict depends on when it is stored.

Errors are never kept (they name the pod's claims and fail the whole attempt); verdicts are the
allocator's answers (``extender.core.answers``): a detached ``Allocation`` (the claims fit), an
``Unfit`` or an ``Unresolvable``. The per-node ``DeviceUsage``
and a shape's per-node ``RawScores`` (what prioritize derives from a verdict and the usage) follow
the same rules. Pure data structure, no I/O.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from extender.core.allocator import Allocation
from extender.core.answers import Unfit, Unresolvable
from extender.core.model import DeviceID
from extender.core.pools import NodeView
from extender.core.scoring import DeviceUsage, RawScores

__all__ = [
    "CURRENT_CANDIDATE_LISTS",
    "DEFAULT_MAX_SHAPES",
    "FitCache",
    "FitCacheStats",
    "ShapeVerdicts",
    "Verdict",
    "remember",
]

#: How many pod shapes keep verdicts. Each costs one dict entry and one small object per node.
DEFAULT_MAX_SHAPES = 16

#: Candidate lists whose answers are remembered (candidate lists, filter answers, score columns).
#: kube-scheduler sends every node, or, when it scores a sample (``percentageOfNodesToScore``),
#: a window that moves round the node list: nodes / sample windows, the same lists coming back in
#: turn (10 at 5000 nodes with its adaptive default of 10 %, 20 at its floor of 5 %). Remembering
#: fewer than a full turn made every list new again by the time it came back.
CURRENT_CANDIDATE_LISTS = 24

#: Drops a shape remembers for ``ShapeVerdicts.unknown`` before it starts over.
_MAX_DROP_LOG = 4096

#: A detached Allocation where the pod fits, else why not.
Verdict = Allocation | Unfit | Unresolvable
PoolKey = tuple[str, str]


@dataclass(slots=True)
class FitCacheStats:
    hits: int = 0
    misses: int = 0
    dropped: int = 0  # node verdicts dropped by invalidation
    stale: int = 0  # verdicts not remembered: their inputs changed while the search paused


def remember(table: dict[Any, Any], key: Any, value: Any) -> None:
    """``table[key] = value``, dropping the oldest entry beyond ``CURRENT_CANDIDATE_LISTS``."""
    if key not in table and len(table) >= CURRENT_CANDIDATE_LISTS:
        del table[next(iter(table))]
    table[key] = value


class ShapeVerdicts:
    """The remembered verdicts of one pod shape.

    ``by_node`` holds every verdict; ``failing`` only those where the pod does not fit, usually a
    few nodes, so a filter can pass all the others without looking at each verdict; ``failed``
    and ``unresolvable`` split the failing nodes' reasons by kind, the two maps of a filter
    answer, ready to copy. ``raw`` holds the scores prioritize derived from the allocations, per
    topology attribute; they are dropped together with the verdict of their node.

    ``unknown(serial, unique)`` answers which nodes of a candidate list (``Candidates.serial``,
    its set ``unique``) have no verdict, from the drops since every one of them had one
    (``mark_covered``) rather than by looking up every node: between two pods a bind drops a node
    or two, and a filter asks about all of them.

    ``columns`` keeps, per candidate list and topology attribute, each candidate's raw-score code
    in list order, brought up to date from the drops since (``dropped_since``): prioritize then
    scores a list of small ints instead of looking every node up.

    ``failing_version`` changes whenever ``failing`` does; ``answers`` is where the service keeps
    a filter answer per candidate list together with the version it was built at, so that the
    next pod of the shape gets the same answer object while no node started or stopped failing.
    """

    __slots__ = (
        "_covered",
        "_dropped",
        "_dropped_base",
        "answers",
        "by_node",
        "codes",
        "columns",
        "failed",
        "failing",
        "failing_version",
        "raw",
        "stale",
        "unresolvable",
        "values",
    )

    def __init__(self) -> None:
        self.by_node: dict[str, Verdict] = {}
        self.failing: dict[str, Unfit | Unresolvable] = {}
        self.failed: dict[str, str] = {}
        self.unresolvable: dict[str, str] = {}
        # node -> the index in ``values`` of its raw scores, per topology attribute: nodes share a
        # handful of distinct raw scores, and small ints hash and index faster than tuples
        self.raw: dict[str | None, dict[str, int]] = {}
        self.values: list[RawScores] = []
        self.codes: dict[RawScores, int] = {}
        # Nodes dropped, oldest first; ``_dropped_base`` is how many were trimmed off its front.
        # A covered candidate list maps to the drop count at the time it was covered.
        self._dropped: list[str] = []
        self._dropped_base = 0
        self._covered: dict[int, int] = {}
        self.failing_version = 0
        self.answers: dict[int, tuple[int, Any]] = {}
        # (topology attribute, candidate list serial) -> (``drops`` when last brought up to date,
        # the code of each candidate's raw scores in list order, None where it does not fit)
        self.columns: dict[tuple[str | None, int], tuple[int, list[int | None]]] = {}
        #: Nodes whose verdict here may be stale (a table of one request whose search paused
        #: while their inputs changed): not to be held on (``Holds.hold`` decides afresh).
        self.stale: frozenset[str] = frozenset()

    def put(self, node: str, verdict: Verdict) -> None:
        if node in self.by_node:  # a replaced verdict is a dropped one: everything derived goes too
            self.drop(node)
        self.by_node[node] = verdict
        if not isinstance(verdict, Allocation):
            self.failing[node] = verdict
            self.failing_version += 1
            (self.unresolvable if isinstance(verdict, Unresolvable) else self.failed)[node] = verdict.reason

    def put_all(self, verdicts: dict[str, Unresolvable]) -> None:
        """``put`` for every node of ``verdicts``, with C-level dict updates for the usual case of
        nodes without a verdict yet (a shared claim pinned elsewhere: every other node at once)."""
        if not verdicts:
            return
        if not self.by_node.keys().isdisjoint(verdicts):
            for node, verdict in verdicts.items():
                self.put(node, verdict)
            return
        self.by_node.update(verdicts)
        self.failing.update(verdicts)
        if len(set(map(id, verdicts.values()))) == 1:  # one claim rules them out: the usual case
            self.unresolvable.update(dict.fromkeys(verdicts, next(iter(verdicts.values())).reason))
        else:
            self.unresolvable.update({node: verdict.reason for node, verdict in verdicts.items()})
        self.failing_version += 1

    def drop(self, node: str) -> bool:
        if self.failing.pop(node, None) is not None:
            self.failing_version += 1
            self.failed.pop(node, None)
            self.unresolvable.pop(node, None)
        for raw in self.raw.values():
            raw.pop(node, None)
        if self.by_node.pop(node, None) is None:
            return False
        dropped = self._dropped
        dropped.append(node)
        if len(dropped) > _MAX_DROP_LOG:  # forget the log; every list gets checked in full once
            self._dropped_base += len(dropped)
            dropped.clear()
            self._covered.clear()
            self.columns.clear()
        return True

    @property
    def drops(self) -> int:
        """How many nodes were dropped so far: a mark for ``dropped_since``."""
        return self._dropped_base + len(self._dropped)

    def dropped_since(self, mark: int) -> list[str] | None:
        """The nodes dropped after ``mark`` (``drops`` then), or None if the log no longer goes
        back that far."""
        if mark < self._dropped_base:
            return None
        return self._dropped[mark - self._dropped_base :]

    def unknown(self, serial: int, unique: set[str]) -> set[str]:
        """The nodes of candidate list ``serial`` (``unique``: its nodes) without a verdict."""
        mark = self._covered.get(serial)
        since = None if mark is None else self.dropped_since(mark)
        if since is None:
            return unique.difference(self.by_node)
        by_node = self.by_node
        return {node for node in since if node in unique and node not in by_node}

    def mark_covered(self, serial: int, mark: int | None = None) -> None:
        """Every node of candidate list ``serial`` has a verdict now (``mark``: had one at that
        ``drops`` mark, for a list taken from one covered then)."""
        remember(self._covered, serial, self.drops if mark is None else mark)

    def covered_at(self, serial: int) -> int | None:
        """The ``drops`` mark at which every node of candidate list ``serial`` had a verdict, or
        None if the list is not covered."""
        return self._covered.get(serial)

    def raw_scores(self, topology_attribute: str | None) -> dict[str, int]:
        """Node -> index of its RawScores in ``values`` (see ``code``)."""
        raw = self.raw.get(topology_attribute)
        if raw is None:
            raw = self.raw[topology_attribute] = {}
        return raw

    def code(self, scores: RawScores) -> int:
        """The index of ``scores`` in ``values``, added if new (bounded: raw scores are small ints)."""
        code = self.codes.get(scores)
        if code is None:
            code = self.codes[scores] = len(self.values)
            self.values.append(scores)
        return code


class FitCache:
    """Verdicts per pod shape and node, and device usage per node; see the module docstring."""

    def __init__(self, *, max_shapes: int = DEFAULT_MAX_SHAPES) -> None:
        if max_shapes < 1:
            raise ValueError("max_shapes must be at least 1")
        self.max_shapes = max_shapes
        self.stats = FitCacheStats()
        # A plain dict kept in LRU order (oldest first), not an OrderedDict: iterating an
        # OrderedDict's values looks every key up again, hashing each shape tuple per table on
        # every invalidation, and invalidations run on every bind.
        self._tables: dict[Hashable, ShapeVerdicts] = {}
        self._usage: dict[str, DeviceUsage] = {}
        # Which nodes have something remembered that depends on a pool, and the view each node
        # registered with (a node registers again after it was dropped or its view changed).
        self._dependents: dict[PoolKey, set[str]] = {}
        self._registered: dict[str, NodeView] = {}
        # How often each node had what was remembered for it dropped, and how often everything
        # was: together a mark that only moves forward (``change_mark``).
        self._drops: dict[str, int] = {}
        self._clears = 0

    # --- reads and writes -------------------------------------------------------------------

    def table(self, shape: Hashable) -> ShapeVerdicts:
        """The verdicts of one pod shape; the caller reads and fills it directly (after
        ``depends``). The least recently used shape beyond ``max_shapes`` is forgotten."""
        tables = self._tables
        table = tables.pop(shape, None)
        if table is None:
            table = ShapeVerdicts()
            if len(tables) >= self.max_shapes:
                del tables[next(iter(tables))]
        tables[shape] = table  # (re)inserted last: the most recently used
        return table

    def usage(self, node: str) -> DeviceUsage | None:
        return self._usage.get(node)

    def remember_usage(self, node: str, view: NodeView, usage: DeviceUsage) -> None:
        self.depends(node, view)
        self._usage[node] = usage

    def depends(self, node: str, view: NodeView) -> None:
        """Record that what is about to be remembered for ``node`` was computed from ``view``."""
        if self._registered.get(node) is view:
            return
        self._registered[node] = view
        for pool in view.pools:
            key = (pool.driver, pool.name)
            nodes = self._dependents.get(key)
            if nodes is None:
                self._dependents[key] = {node}
            else:
                nodes.add(node)

    def change_mark(self, node: str) -> tuple[int, int]:
        """A mark that moves whenever something ``node`` registered for (``depends``) changes, or
        everything is dropped. Unlike the registered view, it never comes back: a node dropped and
        registered again with the same view has another mark."""
        return self._clears, self._drops.get(node, 0)

    def __len__(self) -> int:
        """Remembered node verdicts, over all shapes."""
        return sum(len(table.by_node) for table in self._tables.values())

    # --- invalidation ----------------------------------------------------------------------

    def drop_nodes(self, nodes: Iterable[str]) -> None:
        """Forget everything remembered for these nodes."""
        nodes = tuple(nodes)
        if not nodes:
            return
        for table in self._tables.values():
            for node in nodes:
                if table.drop(node):
                    self.stats.dropped += 1
        drops = self._drops
        for node in nodes:
            self._usage.pop(node, None)
            self._registered.pop(node, None)
            drops[node] = drops.get(node, 0) + 1

    def drop_pools(self, pools: Iterable[PoolKey]) -> None:
        """Forget everything remembered for nodes that see any of these pools."""
        nodes: set[str] = set()
        for pool in pools:
            dependents = self._dependents.pop(pool, None)
            if dependents:
                nodes |= dependents
        self.drop_nodes(nodes)

    def drop_devices(self, devices: Iterable[DeviceID]) -> None:
        """An allocation of these devices changed: forget what depends on their pools."""
        self.drop_pools({(device.driver, device.pool) for device in devices})

    def clear(self) -> None:
        self._clears += 1
        self.stats.dropped += len(self)
        self._tables.clear()
        self._usage.clear()
        self._dependents.clear()
        self._registered.clear()
