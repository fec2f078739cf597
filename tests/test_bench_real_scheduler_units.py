"""The pure parts of ``bench/real_scheduler.py`` (no control plane needed): the extender profile's
configuration variants (``--extender-config``), the prefill plan (``--prefill``) and kube-scheduler's
time per attempt read from its metrics."""

from __future__ import annotations

import pytest

from bench.real_scheduler import extender_scheduler_config, prefill_plan, scheduler_breakdown


def test_an_extender_config_is_a_deploy_overlay_with_overrides() -> None:
    base = extender_scheduler_config("base")
    assert base["profiles"][0]["percentageOfNodesToScore"] == 100
    sampled = extender_scheduler_config("base:pct=10,scores=none,weight=3")
    (profile,) = sampled["profiles"]
    assert profile["percentageOfNodesToScore"] == 10
    assert profile["plugins"]["score"]["disabled"] == [{"name": "*"}]
    assert profile["plugins"]["preScore"]["disabled"] == [{"name": "*"}]
    assert sampled["extenders"][0]["weight"] == 3
    assert extender_scheduler_config("large-cluster")["profiles"][0]["percentageOfNodesToScore"] == 10


@pytest.mark.parametrize("spec", ["nowhere", "base:pct=101", "base:scores=some", "base:speed=2", ":pct=10"])
def test_a_bad_extender_config_is_refused_with_its_name(spec: str) -> None:
    with pytest.raises(ValueError, match="--extender-config"):
        extender_scheduler_config(spec)


def test_a_packed_prefill_takes_whole_nodes() -> None:
    plan = prefill_plan(100, 10, 0.95, "packed", seed=1)
    assert sum(plan.values()) == 950
    assert sorted(plan.values()).count(10) == 95 and len(plan) == 95
    assert plan == prefill_plan(100, 10, 0.95, "packed", seed=1)  # the seed decides which


def test_a_spread_prefill_draws_devices_from_every_node() -> None:
    plan = prefill_plan(100, 10, 0.5, "spread", seed=1)
    assert sum(plan.values()) == 500
    assert len(plan) > 90 and max(plan.values()) <= 10


def test_the_time_per_attempt_splits_into_extension_points_plugins_and_extenders() -> None:
    point = "scheduler_framework_extension_point_duration_seconds_sum"
    samples = {
        "scheduler_scheduling_algorithm_duration_seconds_sum": 2.0,
        "scheduler_scheduling_algorithm_duration_seconds_count": 100.0,
        point + '{extension_point="Filter",profile="p",status="Success"}': 0.5,
        point + '{extension_point="Score",profile="p",status="Success"}': 0.3,
        point + '{extension_point="Bind",profile="p",status="Success"}': 9.0,
        'scheduler_plugin_execution_duration_seconds_sum{extension_point="Filter",plugin="A",status="Success"}': 0.03,
        'scheduler_plugin_execution_duration_seconds_sum{extension_point="Filter",plugin="B",status="Success"}': 0.01,
    }
    points, plugins = scheduler_breakdown(samples)
    assert points == {
        "algorithm": 20.0,
        "PreFilter": 0.0,
        "Filter": 5.0,
        "PreScore": 0.0,
        "Score": 3.0,
        "extenders": 12.0,
    }
    assert plugins == {"Filter/A": 3.75, "Filter/B": 1.25}
    assert scheduler_breakdown({}) == ({}, {})
