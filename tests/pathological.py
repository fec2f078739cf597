"""A pod whose allocation backtracks for a very long time (the reliability tests' fault): a pool of
``devices`` partitions that each consume one unit of a counter set with ``units`` in it, and a
claim for ``units + 1`` of them. Every combination fails only at its last pick, when the counters
have run out, so the search visits all C(devices, units) combinations: about 2 million for the
defaults, minutes of work, where any real pod takes microseconds."""

from __future__ import annotations

from typing import Any

from tests import manifests as m

V1 = m.V1


def counter_pool(node: str, *, devices: int = 30, units: int = 7) -> list[dict[str, Any]]:
    pool = {"name": f"{node}-parts", "generation": 1, "resourceSliceCount": 2}
    one_unit = {"counterSet": "units", "counters": {"units": {"value": "1"}}}
    counters = {
        "apiVersion": V1,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-counters"},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": node,
            "pool": pool,
            "sharedCounters": [{"name": "units", "counters": {"units": {"value": str(units)}}}],
        },
    }
    parts = {
        "apiVersion": V1,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-partitions"},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": node,
            "pool": pool,
            "devices": [{"name": f"part-{i}", "consumesCounters": [one_unit]} for i in range(devices)],
        },
    }
    return [counters, parts]


def greedy_claim(name: str, *, units: int = 7) -> dict[str, Any]:
    """A claim for one partition more than the counters allow."""
    return m.claim(name, count=units + 1)
