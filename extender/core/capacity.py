"""Consumable capacity (DRAConsumableCapacity, docs/semantics.md §11).

``capacity_fits`` decides whether a request can take (a share of) a device given what other
claims and this attempt already consume; ``consumed_capacity`` says what one share consumes after
the device's request policy rounds the requested amounts.
"""

from __future__ import annotations

from collections.abc import Mapping

from extender.core.model import CapacityRequestPolicy, Device, DeviceCapacity
from extender.core.quantity import Quantity

__all__ = ["capacity_fits", "consumed_capacity", "policy_amount", "violates_policy"]


def policy_amount(requested: Quantity | None, capacity: DeviceCapacity) -> Quantity:
    """What a request consumes of one capacity once the policy has rounded it."""
    policy = capacity.request_policy
    if requested is None:
        if policy is not None and policy.default is not None:
            return policy.default
        return capacity.value
    if policy is None:
        return requested
    if policy.range_min is not None:
        minimum = policy.range_min
        if requested < minimum:
            return minimum
        if policy.range_step is not None:
            step = policy.range_step.value_ceil()
            if step > 0:
                excess = requested.value_ceil() - minimum.value_ceil()
                steps = -(-excess // step)  # ceiling division on integers, as upstream's Value()
                return Quantity.from_int(minimum.value_ceil() + steps * step)
        return requested
    if policy.valid_values:
        for value in policy.valid_values:  # sorted ascending by validation
            if value >= requested:
                return value
    return requested


def violates_policy(amount: Quantity, policy: CapacityRequestPolicy | None) -> bool:
    if policy is None:
        return False
    if policy.default is not None and amount == policy.default:
        return False
    if policy.range_min is not None:
        if policy.range_max is not None and amount > policy.range_max:
            return True
        if policy.range_step is not None:
            step = policy.range_step.value_ceil()
            if step > 0 and (amount.value_ceil() - policy.range_min.value_ceil()) % step != 0:
                return True
        return False
    if policy.valid_values:
        return amount not in policy.valid_values
    return False


def consumed_capacity(requests: Mapping[str, Quantity] | None, device: Device) -> dict[str, Quantity]:
    """What one share of ``device`` consumes, for every capacity it has."""
    requests = requests or {}
    return {name: policy_amount(requests.get(name), cap) for name, cap in device.capacity.items()}


def capacity_fits(
    requests: Mapping[str, Quantity] | None,
    device: Device,
    aggregated: Mapping[str, Quantity] | None,
    allocating: Mapping[str, Quantity] | None,
) -> bool:
    """Spec §11 capacity check. An undefined requested capacity means "skip this device"."""
    requests = requests or {}
    capacity = device.capacity
    for name in requests:
        if name not in capacity:
            return False
    for name, cap in capacity.items():
        amount = policy_amount(requests.get(name), cap)
        if violates_policy(amount, cap.request_policy):
            return False
        total = amount
        if aggregated is not None and name in aggregated:
            total = total + aggregated[name]
        if allocating is not None and name in allocating:
            total = total + allocating[name]
        if total > cap.value:
            return False
    return True
