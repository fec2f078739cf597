"""List-typed device attributes (KEP-5491; ``ints``, ``bools``, ``strings``, ``versions``; alpha in
1.36): decoded instead of making the pool invalid, seen by CEL as lists (``exists``, ``in`` and the
1.36 ``includes`` function), and constrained as sets (matchAttribute: a common element;
distinctAttribute: pairwise disjoint; a scalar counts as a one-element set), the semantics 1.37's
allocator has (in 1.36.3 kube-scheduler fails such claims: docs/semantics.md §8)."""

from __future__ import annotations

from typing import Any

import pytest

from extender.core.allocator import allocate_claims
from extender.core.cel import CelRuntimeError, SelectorCache
from extender.core.convert import decode_resource_slice, encode_attribute_value
from extender.core.model import AttributeValue, DeviceConstraint
from extender.core.semver import Semver
from tests import builders as b


def raw_slice(attributes: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "s"},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": "n",
            "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0", "attributes": attributes}],
        },
    }


def test_list_attributes_are_decoded() -> None:
    decoded = decode_resource_slice(
        raw_slice(
            {
                "numa": {"ints": [0, 1]},
                "flags": {"bools": [True]},
                "links": {"strings": ["a", "b"]},
                "firmware": {"versions": ["1.2.3", "2.0.0"]},
            }
        )
    )
    assert decoded.invalid_reason is None
    attributes = decoded.devices[0].attributes
    assert attributes["numa"] == (0, 1) and attributes["flags"] == (True,) and attributes["links"] == ("a", "b")
    assert attributes["firmware"] == (Semver.parse("1.2.3"), Semver.parse("2.0.0"))
    assert encode_attribute_value(attributes["firmware"]) == ["1.2.3", "2.0.0"]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"ints": []}, "must not be empty if specified"),
        ({"ints": list(range(49))}, "must have at most 48 items"),
        ({"ints": [1, "2"]}, "must be an integer"),
        ({"ints": [1], "int": 1}, "exactly one of"),
    ],
)
def test_malformed_lists_make_the_slice_invalid(value: dict[str, Any], problem: str) -> None:
    reason = decode_resource_slice(raw_slice({"numa": value})).invalid_reason
    assert reason is not None and problem in reason


def cel(expression: str, **attributes: AttributeValue) -> bool | CelRuntimeError:
    device = b.device("gpu-0", attributes=attributes)
    (outcome,) = SelectorCache().results(expression, b.node_slice(devices=[device]))
    return outcome


def test_cel_sees_lists_and_includes_tests_membership() -> None:
    attrs = 'device.attributes["driver-a"]'
    assert cel(f"{attrs}.numa.includes(1)", numa=(0, 1)) is True
    assert cel(f"{attrs}.numa.includes(2)", numa=(0, 1)) is False
    assert cel(f"{attrs}.numa.includes(1)", numa=1) is True  # a scalar: equality
    assert cel(f"{attrs}.numa.exists(n, n > 0)", numa=(0, 1)) is True
    assert cel(f"1 in {attrs}.numa", numa=(0, 1)) is True
    assert cel(f'{attrs}.fw.includes(semver("2.0.0"))', fw=(Semver.parse("1.0.0"), Semver.parse("2.0.0"))) is True


def allocate(constraint: DeviceConstraint, *values: AttributeValue) -> list[str] | None:
    devices = [b.device(f"gpu-{i}", attributes={"numa": v}) for i, v in enumerate(values)]
    claim = b.claim(b.CLAIM, b.request(count=2), constraints=[constraint])
    allocation = allocate_claims(
        [claim], b.node(), slices=[b.node_slice(devices=devices)], classes=[b.device_class(b.CLASS)]
    )
    if allocation is None:
        return None
    return [r.device for r in allocation.results[0].devices]


def test_match_attribute_needs_a_common_element() -> None:
    match = b.match_attribute("driver-a/numa")
    assert allocate(match, (0, 1), (2, 3), (1, 2)) == ["gpu-0", "gpu-2"]
    assert allocate(match, (0, 1), (2, 3)) is None
    assert allocate(match, 1, (0, 1)) == ["gpu-0", "gpu-1"]  # a scalar is a one-element set
    assert allocate(match, 1, 1) == ["gpu-0", "gpu-1"]


def test_distinct_attribute_needs_disjoint_sets() -> None:
    distinct = DeviceConstraint(distinct_attribute="driver-a/numa")
    assert allocate(distinct, (0, 1), (1, 2), (2, 3)) == ["gpu-0", "gpu-2"]
    assert allocate(distinct, (0, 1), 1) is None
