"""The verdict cache behind filter and prioritize: candidate lists, per-shape verdicts, filter answer
memos and score columns, over ``state/cache/fit_cache.py``'s remembered verdicts.

``VerdictCache`` has four questions, each asked once per request, and remembers one thing more:

- ``candidates(names)``: the request's node names as the store's own string objects, remembered
  by content (kube-scheduler sends the same lists again and again);
- ``verdicts(claims, candidates)``: the pod shape's verdict on every candidate, from what is
  remembered, with the allocator (``Allocator.answer_many``) asked about the other nodes only;
- ``filter_outcome(verdicts, candidates)``: the filter answer, the same object while no candidate
  started or stopped failing;
- ``score_codes(verdicts, candidates, attribute)``: per candidate the code of its raw scores, kept
  per candidate list and patched with the nodes dropped since;
- ``remember_answer(verdicts, candidates, answer)``: a filter's answer, when it left nodes out, as
  the candidate list prioritize will be asked about next (returned: the filter's pick scores it).

docs/performance.md ("what dominates each curve") says why each of these exists.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import astuple, dataclass, field
from itertools import count, filterfalse

from extender.core.allocator import Allocation, NodeAnswer
from extender.core.answers import Unresolvable
from extender.core.budget import DEFAULT_SLICE_SECONDS
from extender.core.extended import CANNOT_FIT_RESOURCE
from extender.core.model import Features
from extender.core.scoring import DeviceUsage, ScoringCandidate, raw_scores
from extender.state.cache.claims import PodClaims
from extender.state.cache.cluster import ClusterView
from extender.state.cache.fit_cache import ShapeVerdicts, Verdict, remember
from extender.state.cooperative import Pacer

__all__ = ["Candidates", "DuplicateNodes", "FilterOutcome", "VerdictCache"]

#: Joins a candidate list into one key (``candidates``); node names never contain it.
_SEPARATOR = "\x00"
_SERIALS = count()


def _joins_one_list(joined: str, names: int) -> bool:
    """Whether ``joined``, ``names`` names joined with the separator, can key a remembered list:
    none of them holds the separator, so no other list joins alike."""
    return joined.count(_SEPARATOR) == max(0, names - 1)


class DuplicateNodes(ValueError):
    """A prioritize request listed a node that fits more than once (kube-scheduler never does:
    each node can have one score only). The server answers it as a bad request."""


@dataclass(slots=True)
class FilterOutcome:
    """What filter answers. The service may hand the same outcome to several requests (a pod of
    the same shape while no node started or stopped failing): callers read it, never change it."""

    node_names: list[str]
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    error: str = ""
    #: The filter chose the node itself (``--filter-picks-node``): a new outcome every time.
    picked: bool = False


class Candidates:
    """A request's candidate nodes as the store's string objects (``VerdictCache.candidates``):
    the list, the set, and a serial number that no other list gets, under which shapes remember
    what they know of this list (``ShapeVerdicts.unknown``, ``answers``, ``columns``)."""

    __slots__ = ("_positions", "names", "serial", "unique")

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.unique = set(names)
        self.serial = next(_SERIALS)
        self._positions: dict[str, int] | None = None

    def positions(self) -> dict[str, int]:
        """Name -> its index in ``names`` (the last one, for a name listed twice)."""
        if self._positions is None:
            self._positions = {name: i for i, name in enumerate(self.names)}
        return self._positions


class VerdictCache:
    """See the module docstring."""

    def __init__(self, cluster: ClusterView, features: Features) -> None:
        self.cluster = cluster
        self.store = cluster.store
        self.features = features
        # Part of every pod shape key: a tuple hashes in C, the frozen dataclass in Python.
        self._features_key = astuple(features)
        self._recent: dict[str, Candidates] = {}
        # Candidate list serial -> the last filter answer registered for it and the answer's own
        # candidate list (``remember_answer``)
        self._registered: dict[int, tuple[Sequence[str], Candidates]] = {}

    # --- candidate lists -----------------------------------------------------------------------

    def candidates(self, node_names: Sequence[str]) -> Candidates:
        """The request's node names as the store's own string objects, as a list and a set.

        kube-scheduler sends the same candidate list again and again, as fresh strings: hashing
        them and comparing them with the remembered keys cost more than the rest of a remembered
        filter (the remembered strings are spread over the heap, one cache miss each). A list
        equal to a recent one is answered with that one's objects (whose hashes are cached and
        which *are* the keys of the FitCache). Recent lists are found by the names joined into one
        string, which is built from the freshly parsed (cache-hot) names and compared in one
        ``memcmp``; a list whose names contain the separator is not remembered (node names never
        do), and one that joins like a remembered list but has another length is not that list."""
        joined = _SEPARATOR.join(node_names)
        recent = self._recent
        entry = recent.get(joined)
        # Remembered lists have no separator in their names; with as many names, neither has this
        # one, so the two lists are equal.
        if entry is not None and len(entry.names) == len(node_names):
            return entry
        # In C: a Python loop over the names cost more than the rest of a filter once
        # kube-scheduler samples the nodes (``percentageOfNodesToScore``), when lists never repeat.
        canonical = self.store.node_names
        names = list(map(canonical.get, node_names, node_names))
        entry = Candidates(names)
        if _joins_one_list(joined, len(names)):
            remember(recent, joined, entry)
        return entry

    def remember_answer(
        self, verdicts: ShapeVerdicts, candidates: Candidates, answer: Sequence[str]
    ) -> Candidates | None:
        """The filter's answer (``answer``: some of ``candidates``' names, in their order) as a
        candidate list of its own, covered where ``candidates`` is; returned, so that the filter's
        pick (``Prioritizer.pick``) scores it without looking it up again. None where the answer is
        not remembered.

        kube-scheduler asks prioritize about exactly the nodes the filter passed, in the order the
        filter gave them. When it samples (``percentageOfNodesToScore``) its lists rarely repeat,
        and when the filter rejects a node (full, held) the prioritize list is not the filter's: it
        would be a new list, looked up node by node again (the store's strings, the set, which nodes
        lack a verdict). Remembered here it is found by its joined names, and the nodes the filter
        saw with verdicts need no second look.

        Not for one node (kube-scheduler does not prioritize a single feasible node); the filter's
        own list (an answer that left no node out) is remembered as it is, and returned; the answer
        object registered last for this list (the filter answers the same object while nothing
        changed) is not registered again, and its list is returned."""
        if len(answer) < 2:
            return None
        if len(answer) == len(candidates.names):
            return candidates
        registered = self._registered.get(candidates.serial)
        if registered is not None and registered[0] is answer:
            return registered[1]
        mark = verdicts.covered_at(candidates.serial)
        if mark is None:
            return None  # verdicts of this request only (a shape not remembered, a search that paused)
        joined = _SEPARATOR.join(answer)
        if not _joins_one_list(joined, len(answer)):
            return None
        entry = self._recent.get(joined)  # the same names: no name holds the separator
        if entry is None:
            entry = Candidates(list(answer))
            remember(self._recent, joined, entry)
        verdicts.mark_covered(entry.serial, mark)
        remember(self._registered, candidates.serial, (answer, entry))
        return entry

    # --- verdicts ------------------------------------------------------------------------------

    def shape(self, claims: PodClaims) -> Hashable | None:
        """What the allocator's verdict on a node depends on, of the pod: its claims' specs and the
        node selectors of its allocated claims (and the feature gates, in case two services share
        a store). None when a claim's spec is unknown."""
        specs: list[bytes] = []
        for claim in claims.to_allocate:
            spec = self.store.claim_specs.get(claim.key) or claims.provisional.get(claim.key)
            if spec is None and claims.extended_new and claim.key == claims.extended_key:
                assert claims.extended is not None
                spec = claims.extended.key  # the same on every node but those ``on_node`` varies
            if spec is None:
                return None
            specs.append(spec)
        selectors = tuple(c.allocation.node_selector for c in claims.allocated if c.allocation is not None)
        return self._features_key, tuple(specs), selectors

    def verdicts(self, claims: PodClaims, candidates: Candidates) -> ShapeVerdicts:
        """Per node: a detached Allocation (the claims fit), an ``Unfit`` or an ``Unresolvable``.
        Verdicts come from the FitCache where remembered; the allocator runs for the other nodes
        only. Raises the ExtenderError that fails the whole attempt. Every candidate has a verdict
        after."""
        self.cluster.refresh()
        fits = self.store.fits
        shape = self.shape(claims)
        # A pod whose claims are all allocated already is answered from their node selectors at
        # little cost (``AnswerSet.elsewhere``); remembering one shape per shared claim would crowd
        # the templates' shapes out of the FitCache and make every invalidation visit more tables.
        remember = shape is not None and bool(claims.to_allocate)
        table = fits.table(shape) if remember else ShapeVerdicts()
        unknown = table.unknown(candidates.serial, candidates.unique)
        fits.stats.hits += len(candidates.names) - len(unknown)
        if not unknown:
            if remember:
                table.mark_covered(candidates.serial)
            return table
        fits.stats.misses += len(unknown)
        if claims.extended_new:
            unknown = self._decide_extended_variants(claims, table, unknown)
            if not unknown:
                if remember:
                    table.mark_covered(candidates.serial)
                return table
        known: dict[str, Verdict] = {}

        def keep_known() -> None:  # at the first pause, what the table knows of the other candidates
            by_node = table.by_node
            known.update((name, by_node[name]) for name in candidates.unique.difference(unknown) if name in by_node)

        search = self.cluster.watched_search(unknown, on_first_pause=keep_known)
        allocator = self.cluster.allocator(claims, refresh=False, budget=search.budget)
        answers = allocator.answer_many(unknown, self.store.node)
        current = search.unchanged()
        if current is not None and (
            not current.issuperset(answers.decided) or any(table.by_node.get(n) is not v for n, v in known.items())
        ):
            # The search let others run and some nodes' inputs changed meanwhile: this request is
            # answered from what the search saw (as of its start, like a scheduler's snapshot),
            # but only the answers still current are remembered.
            return self._answered_once(table, known, answers.elsewhere, answers.decided, current)
        if answers.elsewhere:
            table.put_all(answers.elsewhere)  # decided from the claims' node names alone
        snapshot = self.store.snapshot()
        for name, answer in answers.decided.items():
            view = snapshot.cached_view(self.store.node(name), self.features)
            if view is not None:  # else decided from the node's labels alone
                fits.depends(name, view)
            table.put(name, answer.detached() if isinstance(answer, Allocation) else answer)
        if remember:  # a table of this request only: nobody asks what it covers
            table.mark_covered(candidates.serial)
        return table

    def _decide_extended_variants(self, claims: PodClaims, table: ShapeVerdicts, unknown: set[str]) -> set[str]:
        """Decide the nodes on which the pod's extended-resource claim is not the usual one
        (``PodClaims.on_node``: the node advertises some of the resources itself, or lacks one no
        class maps), each with its own claims; return the other nodes. Rare (device plugins and DRA
        serving one resource name in one cluster), so these nodes are decided one by one."""
        snapshot = self.store.snapshot()
        rest: set[str] = set()
        for name in unknown:
            node = self.store.node(name)
            variant = claims.on_node(node)
            if variant is claims:
                rest.add(name)
                continue
            if variant is None:
                table.put(name, Unresolvable(CANNOT_FIT_RESOURCE))
                continue
            answer = self.cluster.allocator(variant, refresh=False).answer(node)
            view = snapshot.cached_view(node, self.features)
            if view is not None:
                self.store.fits.depends(name, view)
            table.put(name, answer.detached() if isinstance(answer, Allocation) else answer)
        return rest

    def _answered_once(
        self,
        table: ShapeVerdicts,
        known: dict[str, Verdict],
        elsewhere: dict[str, Unresolvable],
        decided: dict[str, NodeAnswer],
        current: set[str],
    ) -> ShapeVerdicts:
        """The verdicts of one request whose search saw inputs that changed while it paused: the
        current answers go into the remembered ``table``, all of them (with the verdicts ``known``
        at the first pause) into a table of this request only; the remembered one is not marked
        covered, so its missing nodes are asked about again."""
        table.put_all(elsewhere)
        once = ShapeVerdicts()
        for name, verdict in known.items():
            once.put(name, verdict)
        once.put_all(elsewhere)
        for name, answer in decided.items():
            verdict = answer.detached() if isinstance(answer, Allocation) else answer
            if name in current:
                table.put(name, verdict)  # registered with its view at the first pause
            once.put(name, verdict)
        changed_known = {name for name, verdict in known.items() if table.by_node.get(name) is not verdict}
        once.stale = frozenset((decided.keys() - current) | changed_known)
        self.store.fits.stats.stale += len(decided.keys() - current)
        return once

    def filter_outcome(self, verdicts: ShapeVerdicts, candidates: Candidates) -> FilterOutcome:
        """The filter answer from the verdicts (C-level set and dict work only: it is per node)."""
        # The answer only depends on which candidates fail and why: while that stays as it was (a
        # bind usually leaves its node with room), the last answer for this list is the answer.
        answered = verdicts.answers.get(candidates.serial)
        if answered is not None and answered[0] == verdicts.failing_version:
            outcome: FilterOutcome = answered[1]
            return outcome
        node_names, unique, failing = candidates.names, candidates.unique, verdicts.failing
        if len(verdicts.by_node) != len(unique):  # the table knows more nodes than were asked about
            rejected = failing.keys() & unique
            outcome = FilterOutcome(list(filterfalse(rejected.__contains__, node_names)))
            for name in sorted(rejected):
                answer = failing[name]
                (outcome.unresolvable if isinstance(answer, Unresolvable) else outcome.failed)[name] = answer.reason
        else:
            outcome = FilterOutcome(
                list(filterfalse(failing.__contains__, node_names)) if failing else list(node_names),
                failed=verdicts.failed.copy(),
                unresolvable=verdicts.unresolvable.copy(),
            )
        remember(verdicts.answers, candidates.serial, (verdicts.failing_version, outcome))
        return outcome

    # --- scores --------------------------------------------------------------------------------

    def score_codes(self, verdicts: ShapeVerdicts, candidates: Candidates, attribute: str | None) -> list[int | None]:
        """Per candidate, in list order: the code of its raw scores (``ShapeVerdicts.code``), None
        where the pod does not fit. Kept per candidate list and brought up to date from the nodes
        dropped since (a bind drops one or two), so that a repeated prioritize touches those only.
        Raises DuplicateNodes if a fitting node is listed twice."""
        # What is dropped from here on (also while scoring lets the loop run: ``_raw_codes``) is
        # scored again at the next request for this list.
        mark = verdicts.drops
        key = (attribute, candidates.serial)
        kept = verdicts.columns.get(key)
        node_names, names = candidates.names, candidates.unique
        if kept is not None and len(names) == len(node_names):
            since, codes = kept
            changed = verdicts.dropped_since(since)
            if changed is not None:
                positions = candidates.positions()
                stale = {name for name in changed if name in positions}
                if stale:
                    fresh = self._raw_codes(verdicts, stale.difference(verdicts.failing), attribute)
                    for name in stale:
                        codes[positions[name]] = fresh.get(name)
                verdicts.columns[key] = (mark, codes)
                return codes
        # Set operations run in C: this is per node. The scheduler asks about the filter's
        # survivors: usually none of them fails.
        failing = verdicts.failing
        fitting = names if names.isdisjoint(failing) else names.difference(failing)
        if len(names) != len(node_names):
            twice = sorted({name for name in fitting if node_names.count(name) > 1})
            if twice:
                raise DuplicateNodes(f"prioritize: node(s) given twice: {', '.join(twice)}")
        # ``remembered`` may hold nodes this request did not ask about, never a failing one
        remembered = self._raw_codes(verdicts, fitting, attribute)
        codes = list(map(remembered.get, node_names))
        remember(verdicts.columns, key, (mark, codes))
        return codes

    def _raw_codes(self, verdicts: ShapeVerdicts, fitting: set[str], attribute: str | None) -> dict[str, int]:
        """The shape's remembered raw-score codes (node -> code), with those of ``fitting`` (nodes
        whose verdict is an Allocation) computed where missing."""
        remembered = verdicts.raw_scores(attribute)
        unscored = fitting.difference(remembered)
        if unscored:
            usage = self._usage(unscored)
            # A new shape over 15 000 nodes: tens of milliseconds. Under ``cooperative.run`` the
            # loop runs every slice; a node whose verdict or usage changed meanwhile (dropped from
            # the table, its usage forgotten) is left out of this answer, and scored at the next.
            pace, by_node, fits = Pacer(DEFAULT_SLICE_SECONDS).step, verdicts.by_node, self.store.fits
            paused = False
            for name in unscored:
                allocation, used = by_node.get(name), usage.get(name)
                if not isinstance(allocation, Allocation) or used is None or (paused and fits.usage(name) is not used):
                    continue  # dropped while the loop ran (or its pools cannot be gathered: no usage)
                remembered[name] = verdicts.code(raw_scores(ScoringCandidate(allocation, used), attribute))
                paused = pace() or paused
        return remembered

    def _usage(self, node_names: Iterable[str]) -> dict[str, DeviceUsage]:
        """Device usage per node, from the FitCache where remembered."""
        fits = self.store.fits
        out: dict[str, DeviceUsage] = {}
        missing: list[str] = []
        for name in node_names:
            usage = fits.usage(name)
            if usage is None:
                missing.append(name)
            else:
                out[name] = usage
        if missing:
            out.update(self.cluster.count_usage(missing))
        return out
