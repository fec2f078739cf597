"""Claim constraints: matchAttribute and distinctAttribute (docs/semantics.md §8).

A constraint watches the devices picked for the requests it covers within one claim. ``add``
accepts or rejects a device (and records it when accepted); ``remove`` forgets one accepted device
on backtracking. Both are exact inverses, so the search can undo any pick.

distinctAttribute deliberately checks every pair of covered devices (a multiset of values with
reference counts); upstream keys remembered values by request name and so compares devices of
one request only with that request's most recent pick (§8 QUIRK).
"""

from __future__ import annotations

from typing import Protocol

from extender.core.model import AttributeValue, Device, DeviceConstraint
from extender.core.semver import Semver

__all__ = [
    "Constraint",
    "DistinctAttribute",
    "MatchAttribute",
    "build_constraint",
    "comparable_value",
    "lookup_attribute",
    "value_keys",
]


def lookup_attribute(device: Device, domain: str, ident: str, qualified: str, driver: str) -> AttributeValue | None:
    """Upstream's lookup: the exact ``domain/id`` key, else the bare ``id`` when domain is the driver's."""
    attributes = device.attributes
    value = attributes.get(qualified)
    if value is None and domain == driver:
        value = attributes.get(ident)
    return value


def comparable_value(value: AttributeValue) -> tuple[type, object]:
    """A hashable (type, value) pair: bool never equals int, versions compare by their exact text."""
    if isinstance(value, Semver):
        return (Semver, str(value))
    return (type(value), value)


class Constraint(Protocol):
    def add(self, request: str, subrequest: str | None, device: Device, driver: str) -> bool: ...

    def remove(self, request: str, subrequest: str | None, device: Device, driver: str) -> None: ...


class _AttributeConstraint:
    __slots__ = ("attribute", "domain", "ident", "requests")

    def __init__(self, requests: tuple[str, ...], attribute: str) -> None:
        self.requests = frozenset(requests)
        self.attribute = attribute
        domain, _, ident = attribute.partition("/")
        self.domain = domain if ident else ""
        self.ident = ident if ident else attribute

    def applies(self, request: str, subrequest: str | None) -> bool:
        if not self.requests:
            return True
        if request in self.requests:
            return True
        return subrequest is not None and f"{request}/{subrequest}" in self.requests

    def value_of(self, device: Device, driver: str) -> AttributeValue | None:
        return lookup_attribute(device, self.domain, self.ident, self.attribute, driver)


def value_keys(value: AttributeValue) -> frozenset[tuple[type, object]]:
    """The comparable values of an attribute: one for a scalar, each element of a list-typed
    attribute (KEP-5491: a scalar counts as a one-element set)."""
    if isinstance(value, tuple):
        return frozenset(comparable_value(item) for item in value)
    return frozenset((comparable_value(value),))


class MatchAttribute(_AttributeConstraint):
    """All covered devices must have the attribute, with one common type and value; with list-typed
    attributes, the devices' value sets must have a common element (1.37's semantics, see
    docs/semantics.md §8)."""

    __slots__ = ("count", "reference", "sets")

    def __init__(self, requests: tuple[str, ...], attribute: str) -> None:
        super().__init__(requests, attribute)
        self.reference: tuple[type, object] | None = None
        self.count = 0
        #: The value sets of the accepted devices, once a list-typed value was seen (else None:
        #: the scalar path, one reference value).
        self.sets: list[frozenset[tuple[type, object]]] | None = None

    def add(self, request: str, subrequest: str | None, device: Device, driver: str) -> bool:
        if not self.applies(request, subrequest):
            return True
        value = self.value_of(device, driver)
        if value is None:
            return False
        if self.sets is None and not isinstance(value, tuple):
            key = comparable_value(value)
            if self.count == 0:
                self.reference = key
            elif key != self.reference:
                return False
            self.count += 1
            return True
        if self.sets is None:  # the first list: the scalars so far become one-element sets
            self.sets = [frozenset((self.reference,))] * self.count if self.reference is not None else []
        keys = value_keys(value)
        if self.sets and not keys.intersection(*self.sets):
            return False
        self.sets.append(keys)
        self.count += 1
        return True

    def remove(self, request: str, subrequest: str | None, device: Device, driver: str) -> None:
        if not self.applies(request, subrequest):
            return
        self.count -= 1
        if self.sets is not None:
            value = self.value_of(device, driver)
            if value is not None:
                keys = value_keys(value)
                for index in range(len(self.sets) - 1, -1, -1):
                    if self.sets[index] == keys:
                        del self.sets[index]
                        break
        if self.count == 0:
            self.reference = None
            self.sets = None


class DistinctAttribute(_AttributeConstraint):
    """All covered devices must have the attribute, with pairwise different values; with list-typed
    attributes, pairwise disjoint value sets."""

    __slots__ = ("seen",)

    def __init__(self, requests: tuple[str, ...], attribute: str) -> None:
        super().__init__(requests, attribute)
        self.seen: dict[tuple[type, object], int] = {}

    def add(self, request: str, subrequest: str | None, device: Device, driver: str) -> bool:
        if not self.applies(request, subrequest):
            return True
        value = self.value_of(device, driver)
        if value is None:
            return False
        if not isinstance(value, tuple):
            key = comparable_value(value)
            if key in self.seen:
                return False
            self.seen[key] = 1
            return True
        keys = value_keys(value)
        if any(key in self.seen for key in keys):
            return False
        for key in keys:
            self.seen[key] = 1
        return True

    def remove(self, request: str, subrequest: str | None, device: Device, driver: str) -> None:
        if not self.applies(request, subrequest):
            return
        value = self.value_of(device, driver)
        if value is not None:
            for key in value_keys(value):
                self.seen.pop(key, None)


def build_constraint(constraint: DeviceConstraint, *, distinct_supported: bool) -> Constraint | None:
    """A fresh constraint object, or None for an empty/unsupported one (the caller reports it)."""
    if constraint.match_attribute:
        return MatchAttribute(constraint.requests, constraint.match_attribute)
    if constraint.distinct_attribute and distinct_supported:
        return DistinctAttribute(constraint.requests, constraint.distinct_attribute)
    return None
