"""Who holds which device: the one index the read models share (the device map, ``/debug/nodes``,
``kubectl dra why``).

A device is held by a claim the store shows allocated (``allocated``, or ``binding`` while binding
conditions of KEP-5007 are not all met), by a bind in flight (``binding``) or by a tentative hold
(``held``). A holder with admin access keeps a record of the device without taking it (the
allocator does not count it: ``AllocatedState.add_allocation``); readers that ask "who takes this
device" leave those out (``takes``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from extender.core.model import DeviceID, ResourceClaim
from extender.state.bind.conditions import waiting_for
from extender.state.cache.ledger import InFlightLedger
from extender.state.cache.store import ObjectStore

__all__ = ["Holder", "claim_holders", "device_holders", "in_flight_holders"]


@dataclass(frozen=True, slots=True)
class Holder:
    """One claim's hold on a device: ``kind`` is ``allocated`` (the store shows it), ``binding``
    (a bind's in-flight entry, or an allocation waiting for its binding conditions) or ``held``
    (a tentative hold)."""

    claim: str
    pods: tuple[str, ...]
    request: str
    admin_access: bool
    kind: str
    #: An allocated device's binding conditions not met yet (KEP-5007): its pod is not bound until
    #: they are.
    waiting: tuple[str, ...] = ()
    #: The PodGroups (``namespace/name``) the claim is reserved for (KEP-5729: a group's claim is
    #: reserved for the group, not for its pods).
    groups: tuple[str, ...] = ()

    @property
    def takes(self) -> bool:
        """Whether the holder takes the device from others (admin access does not)."""
        return not self.admin_access

    def label(self) -> str:
        """The claim's key, marked `` (binding)`` / `` (held)`` for what is in flight."""
        return self.claim if self.kind == "allocated" or self.waiting else f"{self.claim} ({self.kind})"


def claim_holders(claim: ResourceClaim, raw: Mapping[str, Any]) -> list[tuple[DeviceID, Holder]]:
    """The devices an allocated claim holds (``raw``: the claim as stored, for its device status)."""
    if claim.allocation is None:
        return []
    pods = tuple(f"{claim.namespace}/{ref.name}" for ref in claim.reserved_for if ref.resource == "pods")
    groups = tuple(f"{claim.namespace}/{ref.name}" for ref in claim.reserved_for if ref.resource == "podgroups")
    out: list[tuple[DeviceID, Holder]] = []
    for result in claim.allocation.devices:
        waiting = waiting_for(result, raw)
        kind = "binding" if waiting else "allocated"
        holder = Holder(claim.key, pods, result.request, result.admin_access, kind, waiting, groups)
        out.append((result.device_id, holder))
    return out


def in_flight_holders(ledger: Iterable[Any]) -> dict[DeviceID, list[Holder]]:
    """The devices the in-flight ledger's entries hold (binds and tentative holds)."""
    flight: dict[DeviceID, list[Holder]] = {}
    for entry in ledger:
        kind = "held" if entry.tentative else "binding"
        for result in entry.result.devices:
            holder = Holder(entry.claim_key, (entry.pod_key,), result.request, result.admin_access, kind)
            flight.setdefault(result.device_id, []).append(holder)
    return flight


def device_holders(store: ObjectStore, ledger: InFlightLedger) -> dict[DeviceID, list[Holder]]:
    """Every device's holders, allocated claims first, then what is in flight."""
    holders: dict[DeviceID, list[Holder]] = {}
    for key, claim in store.claims.items():
        for device, holder in claim_holders(claim, store.raw_claims.get(key) or {}):
            holders.setdefault(device, []).append(holder)
    for device, flight in in_flight_holders(ledger).items():
        holders.setdefault(device, []).extend(flight)
    return holders
