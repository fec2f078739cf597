"""``Attempt``: one filter request decided, read-only.

``SchedulingService.attempt(pod, node_names)`` builds it once per request: the pod as the backend
holds it, its resolved claims, the candidate list and the remembered verdicts, and the answer. It
changes nothing (bar the caches it fills). The filter verb then applies its effects in a visible
sequence (``SchedulingService.filter``): the pod's previous holds given back before the decision,
then classic DRA's ``potentialNodes`` published, the rejected-pod bookkeeping and a tentative hold
after it. Explain asks the same ``attempt`` and so can never disagree with filter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from extender.state.claims import PodClaims
from extender.state.fits import ShapeVerdicts
from extender.state.verdicts import Candidates, FilterOutcome

__all__ = ["Attempt"]


@dataclass(slots=True, kw_only=True)
class Attempt:
    """See the module docstring. ``decided`` is false where the answer came before a decision (the
    store not synced, a claim that cannot be used, a pod without claims, a claim whose devices
    failed binding): no effect but the answer follows then."""

    pod: Mapping[str, Any]
    node_names: Sequence[str]
    outcome: FilterOutcome
    claims: PodClaims | None = None
    candidates: Candidates | None = None
    verdicts: ShapeVerdicts | None = None
    #: Classic DRA: the nodes the pod's drivers should be asked about (``potentialNodes``).
    potential: list[str] | None = None
    decided: bool = False
