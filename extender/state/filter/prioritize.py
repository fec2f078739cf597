"""The prioritize verb: a 0..10 score per node from the pod shape's remembered verdicts.

Each candidate's raw scores come from ``VerdictCache.score_codes`` (remembered per candidate list),
are turned into scores by the pod's policy (``core/scoring``: its annotation's, else the service's),
and, with tentative holds on, the first of equally best nodes is made the only best one and the
pod's devices there are held (``holds.py``): kube-scheduler then picks that node.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from extender.core.errors import PodUnschedulable
from extender.core.scoring import TOPOLOGY, ScoringPolicy, scores_by_value
from extender.state.cache.claims import PodClaims
from extender.state.cache.cluster import ClusterView
from extender.state.cache.fit_cache import ShapeVerdicts
from extender.state.cache.pods import pod_annotations, pod_uid
from extender.state.filter.holds import Holds, one_best
from extender.state.filter.verdicts import Candidates, DuplicateNodes, VerdictCache

__all__ = ["Prioritizer"]


class Prioritizer:
    """See the module docstring. ``annotation`` is the pod annotation that may carry a policy."""

    def __init__(
        self, *, cluster: ClusterView, verdicts: VerdictCache, holds: Holds, policy: ScoringPolicy, annotation: str
    ) -> None:
        self.cluster = cluster
        self.verdicts = verdicts
        self.holds = holds
        self.policy = policy
        self.annotation = annotation

    def columns(self, pod: Mapping[str, Any], node_names: Sequence[str]) -> tuple[Sequence[str], list[int]]:
        """The nodes (as given) and their scores (0 where the claims do not fit), as two columns:
        what the HTTP answer is written from, without a pair per node. The pod's previous holds are
        given back first. Raises the ExtenderError that answers ``Error``."""
        pod = self.cluster.pod(pod)
        self.holds.release(pod_uid(pod))
        claims = self.cluster.claims(pod)
        if not claims.all:
            return node_names, [0] * len(node_names)
        return self._scored(claims, self.policy_for(pod), node_names)

    def pick(
        self,
        pod: Mapping[str, Any],
        claims: PodClaims,
        node_names: Sequence[str],
        accept: Callable[[str], bool],
        *,
        known: tuple[Candidates, ShapeVerdicts] | None = None,
    ) -> str | None:
        """The node prioritize would rank first among ``node_names`` (nodes the filter passed), if
        ``accept`` accepts it, with the pod's devices there held as prioritize holds them; None when
        there is none to name (no claim to allocate, a pod annotation's policy that does not parse,
        a node listed twice: prioritize answers those) or it is not accepted. The service's
        ``filter_picks_node`` answers the filter with it alone, and gives ``known``: ``node_names``
        as a candidate list, and the verdicts the filter passed them with (a second look-up of
        both cost about as much as the scores)."""
        if not claims.to_allocate:
            return None
        try:
            policy = self.policy_for(pod)
            names, _, best = self._ranked(claims, policy, node_names, choose=True, accept=accept, known=known)
        except (PodUnschedulable, DuplicateNodes):
            return None  # the whole answer; prioritize then answers as it always has
        return names[best] if best is not None else None

    def _scored(
        self, claims: PodClaims, policy: ScoringPolicy, node_names: Sequence[str]
    ) -> tuple[Sequence[str], list[int]]:
        names, scores, _ = self._ranked(claims, policy, node_names, choose=self.holds.enabled)
        return names, scores

    def _ranked(
        self,
        claims: PodClaims,
        policy: ScoringPolicy,
        node_names: Sequence[str],
        *,
        choose: bool,
        accept: Callable[[str], bool] | None = None,
        known: tuple[Candidates, ShapeVerdicts] | None = None,
    ) -> tuple[Sequence[str], list[int], int | None]:
        """The scores and, with ``choose``, the index of the one best node (``one_best``: the
        scores make it the only best), where the pod's devices are held when holds are on; None
        when nothing is chosen, the pod fits on none of them, has nothing to allocate, or
        ``accept`` refuses the best node. ``known``: the candidate list and verdicts to use (``pick``)."""
        if known is not None:
            candidates, verdicts = known
        else:
            candidates = self.verdicts.candidates(node_names)
            verdicts = self.verdicts.verdicts(claims, candidates)
        attribute = policy.topology_attribute if policy.weights.get(TOPOLOGY) else None
        codes = self.verdicts.score_codes(verdicts, candidates, attribute)
        values = verdicts.values
        in_use = {code: values[code] for code in set(codes) if code is not None}
        by_value = scores_by_value(in_use.values(), policy)
        # node -> code -> score, through C-level maps (None: the node does not fit)
        score_by_code: dict[int | None, int] = {code: by_value[value] for code, value in in_use.items()}
        score_by_code[None] = 0
        scores = list(map(score_by_code.__getitem__, codes))
        best = one_best(scores, codes) if choose and claims.to_allocate and scores else None
        if best is not None and accept is not None and not accept(candidates.names[best]):
            best = None
        if best is not None and self.holds.enabled:
            self.holds.hold_chosen(claims, candidates.names[best], verdicts)
        # a tuple: the list is the service's own canonical one (``VerdictCache.candidates``)
        return tuple(candidates.names), scores, best

    def policy_for(self, pod: Mapping[str, Any]) -> ScoringPolicy:
        """The pod's scoring policy: its annotation's, else the service's."""
        text = pod_annotations(pod).get(self.annotation)
        if not text:
            return self.policy
        try:
            return ScoringPolicy.parse(str(text))
        except ValueError as exc:
            raise PodUnschedulable(f"annotation {self.annotation}: {exc}") from exc
