"""DeviceTaintRules applied to ResourceSlices, as kube-scheduler's slice tracker applies them
(``resourceslice/tracker`` in dynamic-resource-allocation, 1.36): every rule whose selector matches
a device (``driver`` against the slice's driver, ``pool`` against its pool, ``device`` against the
device's name; a field left out matches everything, and so does a rule without a selector — the
scheduler's reading, where the API documentation says such a rule matches nothing) appends its
taint, ``timeAdded`` included, after the device's own taints. The allocator then treats them as any
taint: ``NoSchedule`` and ``NoExecute`` block a device unless the request tolerates them. Rules are
applied in name order (upstream: informer order), so the result does not depend on event order."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from extender.core.model import DeviceTaintRule, ResourceSlice

__all__ = ["apply_taint_rules", "rule_touches"]


def rule_touches(rule: DeviceTaintRule, slice_: ResourceSlice) -> bool:
    """Whether the rule may match devices of the slice (its driver and pool)."""
    return (rule.driver is None or rule.driver == slice_.driver) and (
        rule.pool is None or rule.pool == slice_.pool.name
    )


def apply_taint_rules(slice_: ResourceSlice, rules: Iterable[DeviceTaintRule]) -> ResourceSlice:
    """The slice with the rules' taints on the devices they match; the same object when none does."""
    touching = sorted((r for r in rules if rule_touches(r, slice_)), key=lambda r: r.name)
    if not touching:
        return slice_
    devices = []
    changed = False
    for device in slice_.devices:
        added = tuple(r.taint for r in touching if r.device is None or r.device == device.name)
        if added:
            changed = True
            device = dataclasses.replace(device, taints=device.taints + added)
        devices.append(device)
    return dataclasses.replace(slice_, devices=tuple(devices)) if changed else slice_
