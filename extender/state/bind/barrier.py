"""The gang bind barrier: no member of a gang is bound until every member of its pass has its
claims written (spec/workloads-and-gangs.md §7.5, failure F5).

kube-scheduler sends the binds of a pass's members together, each on its own (spec §4, E5a), and
after Permit it has no gang semantics left (§3.3): a member whose claim write fails is retried
alone while the others are bound already, a partial gang. Here each member's bind decides and
writes its claims as before, then waits at the *gate* before its binding:

- a **round** opens at the first bind of a member of a pass; its members are those the pass
  answered with a node and not bound yet (``GangFilter.bind_members``), which are the pods
  kube-scheduler binds;
- every member of the round written: all bindings go out;
- a member failing before its binding (its decision, its template claims, a claim write, the
  deadline): every member of the round undoes its writes and answers ``Error``, so kube-scheduler
  unreserves them all and the next pass plans the gang again. The PodGroup's claims stay (upstream's
  Unreserve never takes a group's reservation back; the next plan uses them);
- members whose binds have not come ``wait_seconds`` after the round opened take no part (kube-scheduler
  dropped them); the others go on without them, and such a straggler is bound alone.

A binding that fails after the gate is its member's alone (the others may be bound by then), as
upstream: that member is retried, and the gang's bound members count toward its ``minCount``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from extender.core.errors import Transient
from extender.state.cache.pods import pod_identity
from extender.state.stats import ServiceStats

__all__ = ["DEFAULT_GANG_BARRIER_SECONDS", "GangAborted", "GangBarrier", "GangRound"]

#: How long a round waits for its members' binds to come (they come within milliseconds of each
#: other, spec E5a); well inside a bind's deadline, so the writes still fit after it.
DEFAULT_GANG_BARRIER_SECONDS = 3.0

#: Rounds kept (one per group) before those over are dropped.
MAX_ROUNDS = 256

#: ``(group key, pass, member UIDs)`` of a pod's round (``pass`` tells the gang's passes apart), or
#: None when the pod binds alone.
MembersOf = Callable[[Mapping[str, Any]], "tuple[str, int, frozenset[str]] | None"]


class GangAborted(Transient):
    """Another member of the gang failed before its binding: this member's writes are undone."""


@dataclass(eq=False, slots=True)
class GangRound:
    """The binds of one pass of a gang, from the first one's arrival to the last one's end."""

    group: str
    #: The gang's pass the round's members were placed in.
    pass_id: int
    #: The members the pass placed; narrowed to those that came once the round closes.
    members: frozenset[str]
    #: Loop time by which members must have come.
    closes_at: float
    stats: ServiceStats
    names: dict[str, str] = field(default_factory=dict)
    joined: set[str] = field(default_factory=set)
    written: set[str] = field(default_factory=set)
    left: set[str] = field(default_factory=set)
    closed: bool = False
    #: ``"<member> failed: <reason>"`` of the first failure before the gate opened.
    failure: str | None = None
    #: Every member wrote its claims: the bindings go out; later failures are the member's own.
    opened: bool = False
    _wake: list[asyncio.Event] = field(default_factory=list)

    def join(self, uid: str, name: str) -> None:
        self.joined.add(uid)
        self.names[uid] = name
        if self.joined >= self.members:
            self._close()

    def check(self) -> None:
        """Raise ``GangAborted`` if another member has failed already (nothing to write then)."""
        if self.failure is not None:
            raise GangAborted(f"gang {self.group}: no member is bound because the bind of {self.failure}")

    async def gate(self, uid: str) -> None:
        """``uid`` has written its claims: wait until every member has (then return) or one has
        failed (then raise ``GangAborted``). The caller's own deadline bounds the wait."""
        self.written.add(uid)
        self._notify()  # this member's write may complete the round for the others
        event = asyncio.Event()
        self._wake.append(event)
        try:
            while True:
                self._settle()
                self.check()
                if self.opened:
                    return
                event.clear()
                remaining = None if self.closed else self.closes_at - asyncio.get_running_loop().time()
                if remaining is not None and remaining <= 0:
                    self._close()
                    continue
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(remaining):
                        await event.wait()
        finally:
            self._wake.remove(event)

    def fail(self, uid: str, reason: str) -> None:
        """``uid``'s bind failed: before the gate opened, every member gives up (and so does any
        member of the pass that comes later)."""
        if self.opened or self.failure is not None:
            return
        self.failure = f"{self.names.get(uid, uid)} failed: {reason}"
        self.stats.count_gang_barrier("aborted")
        self._notify()

    def leave(self, uid: str) -> None:
        """``uid``'s bind is over; one that neither wrote nor failed had nothing to write (bound
        already) and holds nobody back."""
        if self.failure is None:
            self.written.add(uid)
        self.left.add(uid)
        self._notify()

    def expire(self, now: float) -> None:
        """Past ``closes_at``: members that have not come take no part any more."""
        if now >= self.closes_at:
            self._close()
            self._settle()

    @property
    def over(self) -> bool:
        """Every member that came has left, and none may come any more."""
        return self.left >= self.joined and self.closed

    def _close(self) -> None:
        if not self.closed:
            self.closed = True
            if not self.joined >= self.members:
                self.stats.count_gang_barrier("partial")
            self.members = frozenset(self.joined)

    def _settle(self) -> None:
        if self.opened or self.failure is not None or not self.closed:
            return
        if self.written >= self.members:
            self.opened = True
            self.stats.count_gang_barrier("opened")

    def _notify(self) -> None:
        for event in self._wake:
            event.set()


class GangBarrier:
    """The rounds, by group (see the module docstring). ``wait_seconds`` 0 switches it off.

    A group's round stays after its members have left, until its gang's next pass: a member of the
    pass that comes later then learns what became of it (failed: it fails at once; gone on
    without it: it binds alone, without waiting again)."""

    def __init__(self, members_of: MembersOf, stats: ServiceStats, *, wait_seconds: float) -> None:
        if wait_seconds < 0:
            raise ValueError("the gang barrier's wait must not be negative")
        self.members_of = members_of
        self.stats = stats
        self.wait_seconds = wait_seconds
        self.rounds: dict[str, GangRound] = {}

    def join(self, pod: Mapping[str, Any]) -> GangRound | None:
        """The round the pod's bind takes part in, or None (no gang, a gang of one, the barrier off,
        or a straggler whose round went on without it). A round that failed is returned to a member
        of its pass that comes late: ``GangRound.check`` then fails its bind."""
        if not self.wait_seconds:
            return None
        found = self.members_of(pod)
        if found is None:
            return None
        group, pass_id, members = found
        _, name, uid = pod_identity(pod)
        now = asyncio.get_running_loop().time()
        if len(self.rounds) > MAX_ROUNDS:  # groups long gone
            for key in [key for key, kept in self.rounds.items() if kept.over]:
                del self.rounds[key]
        current = self.rounds.get(group)
        if current is not None and current.pass_id != pass_id:
            current = None  # the gang's next pass: a round of its own
        if current is None:
            if uid not in members or len(members) < 2:
                return None
            current = self.rounds[group] = GangRound(group, pass_id, members, now + self.wait_seconds, self.stats)
        current.expire(now)
        if current.failure is not None:
            current.join(uid, name)  # to fail at once
            return current
        if current.closed or uid not in current.members or uid in current.joined:
            return None
        current.join(uid, name)
        return current

    @staticmethod
    def finished(gang_round: GangRound, uid: str) -> None:
        """The member's bind is over, however it ended (the round stays: see the class)."""
        gang_round.leave(uid)
