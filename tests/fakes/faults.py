"""Scripted misbehaviour of the fake apiserver: the rules tests install to make requests fail,
wait, hang, or to cut watch streams.

A rule matches on HTTP method (None = any) and a regular expression searched in the request path
(and optionally only watch / non-watch requests). It fires ``times`` times (None = forever), then
is spent. For one request every matching ``delay`` rule adds its wait; then the first matching
``fail``, ``hang``, ``drop`` or ``lose`` rule applies (``lose``: the request is carried out, then
the connection is closed instead of answering: a write whose answer never arrives).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Action", "FaultRule", "Faults"]

Action = Literal["fail", "delay", "hang", "drop", "lose"]


@dataclass
class FaultRule:
    """One scripted fault. ``status``/``message``/``retry_after``/``body`` shape a ``fail``;
    ``seconds`` a ``delay``; ``after_events`` how many watch events a ``drop`` lets through
    before closing the connection abruptly (mid chunked stream, like a network cut)."""

    action: Action
    method: str | None = None
    path: str = ""
    watch: bool | None = None
    times: int | None = 1
    status: int = 500
    message: str = "injected fault"
    retry_after: int | None = None
    body: dict[str, Any] | None = None
    seconds: float = 0.0
    after_events: int = 0
    #: How many requests this rule has affected.
    hits: int = 0
    _pattern: re.Pattern[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._pattern = re.compile(self.path)

    @property
    def spent(self) -> bool:
        return self.times is not None and self.hits >= self.times

    def matches(self, method: str, path: str, is_watch: bool) -> bool:
        if self.spent:
            return False
        if self.method is not None and self.method.upper() != method.upper():
            return False
        if self.watch is not None and self.watch != is_watch:
            return False
        return self._pattern.search(path) is not None


class Faults:
    """The installed rules, in installation order."""

    def __init__(self) -> None:
        self.rules: list[FaultRule] = []

    def add(self, rule: FaultRule) -> FaultRule:
        self.rules.append(rule)
        return rule

    def clear(self) -> None:
        self.rules.clear()

    def select(self, method: str, path: str, is_watch: bool) -> tuple[list[FaultRule], FaultRule | None]:
        """(delay rules to apply, the terminal rule or None) for one request; counts the hits."""
        delays: list[FaultRule] = []
        terminal: FaultRule | None = None
        for rule in self.rules:
            if not rule.matches(method, path, is_watch):
                continue
            if rule.action == "delay":
                rule.hits += 1
                delays.append(rule)
            elif terminal is None and (rule.action != "drop" or is_watch):
                rule.hits += 1
                terminal = rule
        return delays, terminal
