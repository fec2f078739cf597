"""Counters of the scheduling service, read by the server's metrics (``server/metrics.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ServiceStats"]


@dataclass(slots=True)
class ServiceStats:
    """Counters the server exports as metrics."""

    allocations: int = 0  # claims allocated by successful binds
    binds_ok: int = 0
    binds_failed: dict[str, int] = field(default_factory=dict)  # by error class name
    #: tentative holds by what became of them: placed, kept (bind chose the held node), moved
    #: (bind chose another), dropped (the pod's next filter), expired
    holds: dict[str, int] = field(default_factory=dict)
    #: seconds from a hold to its pod's bind, summed, and how many binds found a hold
    hold_age_seconds: float = 0.0
    hold_age_max_seconds: float = 0.0
    holds_settled: int = 0
    #: binds that waited for the resourceclaim controller, and the seconds they waited
    claim_waits: int = 0
    #: Binds whose devices' binding conditions were all met / not yet met (KEP-5007).
    binding_conditions_met: int = 0
    binding_conditions_pending: int = 0
    claim_wait_seconds: float = 0.0
    #: Of those binds, the ones that kept the devices decided before the wait (no second decision).
    claim_decisions_kept: int = 0
    #: Template claims the resourceclaim controller replaced (kubernetes#140217, ``bind/replaced.py``),
    #: by outcome: moved (during the bind), moved_after_binding, failed (after the binding).
    replaced_claims: dict[str, int] = field(default_factory=dict)
    #: Filter answers that named the one node prioritize would rank first (``--filter-picks-node``).
    filter_picks: int = 0
    #: Gang plans by outcome: found, greedy (the search budget ran out, one member at a time
    #: placed enough), infeasible, budget (ran out, and greedy did not place enough), remembered
    #: (an infeasible answer reused: nothing changed since).
    gang_plans: dict[str, int] = field(default_factory=dict)
    #: Gang bind barrier rounds (``bind/barrier.py``): opened (every member written, the bindings
    #: went out), partial (some members' binds never came: closed without them), aborted (a member
    #: failed before its binding: every member's writes undone).
    gang_barrier: dict[str, int] = field(default_factory=dict)

    def count_hold(self, outcome: str, n: int = 1) -> None:
        self.holds[outcome] = self.holds.get(outcome, 0) + n

    def count_replaced(self, outcome: str, n: int = 1) -> None:
        self.replaced_claims[outcome] = self.replaced_claims.get(outcome, 0) + n

    def count_gang_plan(self, outcome: str) -> None:
        self.gang_plans[outcome] = self.gang_plans.get(outcome, 0) + 1

    def count_gang_barrier(self, outcome: str) -> None:
        self.gang_barrier[outcome] = self.gang_barrier.get(outcome, 0) + 1

    def count_bind_failure(self, kind: str) -> None:
        self.binds_failed[kind] = self.binds_failed.get(kind, 0) + 1
