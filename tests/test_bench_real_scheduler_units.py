"""The pure parts of ``bench/real_scheduler.py`` (no control plane needed): the extender profile's
configuration variants (``--extender-config``), the prefill plan (``--prefill``) and kube-scheduler's
time per attempt read from its metrics, and the check of a run's pods and claims."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import pytest

from bench.real_scheduler import (
    extender_counts,
    extender_overlay_args,
    extender_scheduler_config,
    extender_tls,
    parse_metrics,
    prefill_plan,
    scheduler_breakdown,
    verify,
)


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


def test_an_extender_run_gets_the_flags_its_overlay_adds_to_the_base() -> None:
    assert extender_overlay_args("base") == []
    assert extender_overlay_args("large-cluster") == ["--filter-picks-node"]
    assert extender_overlay_args("large-cluster:pct=50") == ["--filter-picks-node"]
    assert extender_overlay_args("large-cluster:pct=50,picks=off") == []
    assert extender_scheduler_config("large-cluster:picks=off") == extender_scheduler_config("large-cluster")


def test_an_extender_run_with_tls_gets_certificates_and_both_sides_configured(tmp_path: Path) -> None:
    """``tls=KEY``: certificates made for the run; the extender's flags and kube-scheduler's
    ``tlsConfig`` as ``deploy/tls`` has them (client certificates required, a CA to verify)."""
    assert extender_tls("large-cluster", tmp_path / "none") is None
    assert extender_scheduler_config("large-cluster:tls=ec") == extender_scheduler_config("large-cluster")
    assert extender_overlay_args("large-cluster:tls=ec") == ["--filter-picks-node"]
    tls = extender_tls("large-cluster:pct=20,tls=ec", tmp_path / "tls")
    assert tls is not None
    args = dict(zip(tls.server_args[::2], tls.server_args[1::2], strict=True))
    assert set(args) == {"--tls-cert-file", "--tls-key-file", "--tls-client-ca-file"}
    assert all(Path(path).is_file() for path in args.values())
    config = tls.scheduler_tls_config
    assert config["insecure"] is False and config["caFile"] == args["--tls-client-ca-file"]
    assert Path(config["certFile"]).is_file() and Path(config["keyFile"]).is_file()
    assert tls.client_context().verify_mode == ssl.CERT_REQUIRED


@pytest.mark.parametrize(
    "spec", ["nowhere", "base:pct=101", "base:scores=some", "base:speed=2", ":pct=10", "base:tls=dsa"]
)
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


def test_the_extenders_counters_are_read_from_its_metrics_by_the_benchs_names() -> None:
    text = "\n".join(
        [
            "# TYPE dra_extender_bind_claim_waits_total counter",
            "dra_extender_bind_claim_waits_total 7.0",
            "dra_extender_bind_claim_decisions_kept_total 5.0",
            'dra_extender_replaced_claims_total{outcome="moved"} 2.0',
            'dra_extender_replaced_claims_total{outcome="moved_after_binding"} 1.0',
            'dra_extender_binds_total{outcome="bound",reason=""} 9.0',
        ]
    )
    assert extender_counts(parse_metrics(text)) == {
        "binds that waited for a claim": 7.0,
        "of which kept their decision": 5.0,
        "claims the controller replaced, moved by their bind": 2.0,
        "moved after the binding": 1.0,
    }


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


class _Admin:
    """``items(path)`` over fixed pods and claims, as the bench's admin client answers."""

    def __init__(self, pods: list[dict[str, Any]], claims: list[dict[str, Any]]) -> None:
        self.pods, self.claims = pods, claims

    def items(self, path: str) -> list[dict[str, Any]]:
        return self.pods if path.endswith("/pods") else self.claims


def _claim(name: str, allocated_on: str | None, *, pod_uid: str = "u1", entry: str = "devices") -> dict[str, Any]:
    status: dict[str, Any] = {}
    if allocated_on:
        result = {"driver": "gpu.example.com", "pool": allocated_on, "device": f"gpu-{name}"}
        status = {"allocation": {"devices": {"results": [result]}}, "reservedFor": [{"name": "p1", "uid": pod_uid}]}
    meta = {"name": name, "namespace": "ns", "ownerReferences": [{"kind": "Pod", "name": "p1", "uid": pod_uid}],
            "annotations": {"resource.kubernetes.io/pod-claim-name": entry}}  # fmt: skip
    return {"metadata": meta, "status": status}


def test_verify_names_a_claim_the_resourceclaim_controller_replaced_after_the_pod_was_scheduled() -> None:
    """The pod's status names a second claim, unallocated; the first, made for the same entry, is
    allocated for the pod (kube-controller-manager 1.36, kubernetes#140217): still a problem (the
    pod cannot run), named as such."""
    pod = {"metadata": {"name": "p1", "uid": "u1"},
           "spec": {"nodeName": "node-1", "resourceClaims": [{"name": "devices", "resourceClaimTemplateName": "t"}]},
           "status": {"resourceClaimStatuses": [{"name": "devices", "resourceClaimName": "p1-devices-b"}]}}  # fmt: skip
    admin = _Admin([pod], [_claim("p1-devices-a", "node-1"), _claim("p1-devices-b", None)])
    assert verify(admin, "ns", 1) == [
        "claim p1-devices-b of bound pod p1 not allocated (the resourceclaim controller made it after"
        " p1-devices-a, which is allocated for the pod: kubernetes#140217)"
    ]
    alone = _Admin([pod], [_claim("p1-devices-b", None)])
    assert verify(alone, "ns", 1) == ["claim p1-devices-b of bound pod p1 not allocated"]
    pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"] = "p1-devices-a"
    assert verify(admin, "ns", 1) == []


def test_the_extender_runs_from_the_checkout_bench_extender_root_names(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The "before" side of a side-by-side run: every benchmark's extender (the real-scheduler
    one's too, through the e2e harness) runs the code of ``BENCH_EXTENDER_ROOT``."""
    from bench.common import ROOT, ROOT_ENV, extender_root
    from tests.e2e.harness import Extender

    monkeypatch.delenv(ROOT_ENV, raising=False)
    assert extender_root() == ROOT
    other = tmp_path / "other"
    (other / "extender").mkdir(parents=True)
    monkeypatch.setenv(ROOT_ENV, str(other))
    with pytest.raises(SystemExit, match="not a checkout of dra-extender"):
        extender_root()
    (other / "extender" / "__main__.py").write_text("")
    assert extender_root() == other.resolve()
    started: list[dict[str, Any]] = []

    def popen(command: list[str], **kwargs: Any) -> None:
        started.append(kwargs)
        raise OSError("not started in this test")

    monkeypatch.setattr("tests.e2e.harness.subprocess.Popen", popen)
    with pytest.raises(OSError, match="not started"):
        Extender(tmp_path / "kubeconfig", tmp_path / "log", root=extender_root()).start()
    (kwargs,) = started
    assert kwargs["cwd"] == other.resolve() and kwargs["env"]["PYTHONPATH"] == str(other.resolve())
