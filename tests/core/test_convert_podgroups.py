"""PodGroup decoding (scheduling.k8s.io v1alpha2 as 1.36 serves it; v1beta1's renamed fields)."""

from __future__ import annotations

from typing import Any

import pytest

from extender.core.convert import decode_pod_group
from extender.core.errors import InvalidObject
from extender.core.podgroups import GANG_TOPOLOGY_ANNOTATION, PodGroupClaim


def pod_group(spec: dict[str, Any], *, version: str = "v1alpha2", **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"scheduling.k8s.io/{version}",
        "kind": "PodGroup",
        "metadata": {"name": "pg", "namespace": "team", "uid": "pg-uid", "resourceVersion": "7", **meta},
        "spec": spec,
    }


def test_a_1_36_gang_with_claims_topology_and_status() -> None:
    raw = pod_group(
        {
            "podGroupTemplateRef": {"workload": {"workloadName": "job", "podGroupTemplateName": "workers"}},
            "schedulingPolicy": {"gang": {"minCount": 3}},
            "schedulingConstraints": {"topology": [{"key": "example.com/rack"}]},
            "resourceClaims": [
                {"name": "domain", "resourceClaimTemplateName": "domain-template"},
                {"name": "shared", "resourceClaimName": "shared-claim"},
            ],
            "disruptionMode": "PodGroup",
            "priority": 1000,
        }
    )
    raw["status"] = {"resourceClaimStatuses": [{"name": "domain", "resourceClaimName": "pg-domain-qplk9"}]}
    group = decode_pod_group(raw)
    assert (group.key, group.uid, group.api_version) == ("team/pg", "pg-uid", "scheduling.k8s.io/v1alpha2")
    assert group.gang and group.min_count == 3
    assert (group.topology_key, group.topology_source) == ("example.com/rack", "constraints")
    assert group.claims == (
        PodGroupClaim("domain", template_name="domain-template"),
        PodGroupClaim("shared", claim_name="shared-claim"),
    )
    assert group.claim_status("domain") == "pg-domain-qplk9" and group.claim_status("shared") is None
    assert group.disruption_all and group.priority == 1000 and group.workload == "job"


def test_a_basic_group_is_no_gang_and_the_defaults_read_as_go_zero_values() -> None:
    group = decode_pod_group(pod_group({"schedulingPolicy": {"basic": {}}}))
    assert not group.gang and group.min_count is None
    assert (group.topology_key, group.claims, group.disruption_all, group.priority) == ("", (), False, None)


def test_the_topology_annotation_applies_when_the_constraint_was_dropped() -> None:
    raw = pod_group(
        {"schedulingPolicy": {"gang": {"minCount": 2}}}, annotations={GANG_TOPOLOGY_ANNOTATION: "example.com/rack"}
    )
    group = decode_pod_group(raw)
    assert (group.topology_key, group.topology_source) == ("example.com/rack", "annotation")


def test_1_37_spellings_are_read() -> None:
    raw = pod_group(
        {
            "workloadRef": {"workloadName": "job", "templateName": "workers"},
            "schedulingPolicy": {"gang": {"minCount": 2}},
            "disruptionMode": {"all": {}},
        },
        version="v1beta1",
    )
    group = decode_pod_group(raw)
    assert group.workload == "job" and group.disruption_all and group.api_version == "scheduling.k8s.io/v1beta1"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"schedulingPolicy": {"gang": {"minCount": 0}}}, "spec.schedulingPolicy.gang.minCount"),
        ({"schedulingPolicy": {"gang": {"minCount": "3"}}}, "must be an integer"),
        ({"schedulingPolicy": {"gang": {"minCount": 2}, "basic": {}}}, "exactly one of basic and gang"),
        ({"schedulingConstraints": {"topology": [{"key": "a"}, {"key": "b"}]}}, "at most 1 item"),
        ({"resourceClaims": [{"name": "a"}]}, "exactly one of resourceClaimName"),
        ({"resourceClaims": [{"name": "a", "resourceClaimName": "x", "resourceClaimTemplateName": "y"}]}, "exactly"),
        ({"resourceClaims": [{"name": "a", "resourceClaimName": "x"}] * 2}, "Duplicate value"),
        ({"resourceClaims": [{"name": f"c{i}", "resourceClaimName": "x"} for i in range(5)]}, "at most 4 items"),
        ({"disruptionMode": "Sometimes"}, "Unsupported value"),
    ],
)
def test_what_the_api_server_would_refuse_is_refused_with_the_field(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidObject, match=message.replace(".", r"\.")):
        decode_pod_group(pod_group(spec))


def test_another_group_version_is_refused() -> None:
    with pytest.raises(InvalidObject, match="unsupported apiVersion"):
        decode_pod_group({**pod_group({}), "apiVersion": "scheduling.x-k8s.io/v1alpha1"})
