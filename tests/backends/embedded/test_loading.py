"""Loading manifests into the embedded cluster: files (multi-document YAML, JSON, ``kind: List``),
directories, every served resource.k8s.io version, unknown kinds, the fields the API server fills
on creation (resourceVersion, uid, creationTimestamp), and clear errors for malformed objects."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from extender.backends.base import Backend
from extender.backends.embedded import EmbeddedBackend
from extender.core.errors import InvalidObject

from .helpers import claim, device_class, node_slice, pod, template

NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1", "labels": {"zone": "a"}}}
NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}


def write_yaml(path: Path, *docs: object) -> Path:
    path.write_text(yaml.safe_dump_all(docs))
    return path


def test_implements_the_backend_protocol() -> None:
    assert isinstance(EmbeddedBackend(), Backend)


def test_multi_document_yaml_is_loaded_and_synced(tmp_path: Path) -> None:
    path = write_yaml(tmp_path / "cluster.yaml", NODE, device_class(), node_slice(), claim())
    backend = EmbeddedBackend.from_paths(path)
    assert backend.synced
    assert set(backend.store.nodes) == {"node-1"}
    assert set(backend.store.classes) == {"gpu"}
    assert set(backend.store.slices) == {"node-1-gpus"}
    assert set(backend.store.claims) == {"default/claim-0"}


def test_list_json_and_directories(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "list.json").write_text(
        json.dumps({"apiVersion": "v1", "kind": "List", "items": [device_class("gpu"), device_class("other")]})
    )
    write_yaml(tmp_path / "a" / "slices.yml", node_slice("node-1"), node_slice("node-2"))
    write_yaml(tmp_path / "b.yaml", claim())
    (tmp_path / "notes.txt").write_text("not a manifest")
    backend = EmbeddedBackend.from_paths(tmp_path / "a", tmp_path / "b.yaml")
    assert set(backend.store.classes) == {"gpu", "other"}
    assert set(backend.store.slices) == {"node-1-gpus", "node-2-gpus"}
    assert set(backend.store.claims) == {"default/claim-0"}


@pytest.mark.parametrize(
    ("version", "request_body"),
    [
        ("resource.k8s.io/v1", {"name": "req-0", "exactly": {"deviceClassName": "gpu", "count": 2}}),
        ("resource.k8s.io/v1beta2", {"name": "req-0", "exactly": {"deviceClassName": "gpu", "count": 2}}),
        ("resource.k8s.io/v1beta1", {"name": "req-0", "deviceClassName": "gpu", "count": 2}),
        ("resource.k8s.io/v1alpha3", {"name": "req-0", "deviceClassName": "gpu", "count": 2}),
    ],
)
def test_every_served_version_loads(version: str, request_body: dict[str, object]) -> None:
    raw = claim()
    raw["apiVersion"] = version
    raw["spec"] = {"devices": {"requests": [request_body]}}
    backend = EmbeddedBackend([raw])
    decoded = backend.store.claims["default/claim-0"]
    assert decoded.api_version == version
    assert decoded.requests[0].exactly is not None
    assert decoded.requests[0].exactly.count == 2
    assert backend.get("ResourceClaim", "default", "claim-0")["apiVersion"] == version  # type: ignore[index]


def test_unknown_kinds_are_kept_but_not_decoded() -> None:
    backend = EmbeddedBackend([NAMESPACE, claim(namespace="team-a")])
    assert backend.list_objects("Namespace")[0]["metadata"]["name"] == "team-a"
    assert set(backend.store.claims) == {"team-a/claim-0"}


def test_creation_fields_are_filled() -> None:
    raw = claim()
    raw["metadata"]["resourceVersion"] = "999"  # whatever a manifest says is replaced
    backend = EmbeddedBackend([device_class(), raw, pod(uid=None)])
    stored = [backend.get("DeviceClass", None, "gpu"), backend.get("ResourceClaim", "default", "claim-0")]
    stored.append(backend.get("Pod", "default", "pod-0"))
    versions = []
    for obj in stored:
        assert obj is not None
        meta = obj["metadata"]
        assert meta["uid"]
        assert meta["creationTimestamp"].endswith("Z")
        versions.append(int(meta["resourceVersion"]))
    assert versions == [1, 2, 3]
    assert backend.resource_version == 3
    assert backend.store.claims["default/claim-0"].resource_version == "2"


def test_given_uid_is_kept_and_namespace_defaulted() -> None:
    raw = claim()
    del raw["metadata"]["namespace"]
    raw["metadata"]["uid"] = "claim-uid"
    backend = EmbeddedBackend([raw])
    stored = backend.get("ResourceClaim", "default", "claim-0")
    assert stored is not None
    assert stored["metadata"]["uid"] == "claim-uid"
    assert stored["metadata"]["namespace"] == "default"


def test_yaml_timestamps_become_rfc3339_text(tmp_path: Path) -> None:
    path = tmp_path / "claim.yaml"
    path.write_text(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\n"
        "metadata: {name: c, namespace: default, creationTimestamp: 2024-05-01T10:00:00Z,"
        " deletionTimestamp: 2024-05-02T10:00:00Z, finalizers: [x]}\n"
        "spec: {devices: {requests: [{name: r, exactly: {deviceClassName: gpu}}]}}\n"
    )
    backend = EmbeddedBackend.from_paths(path)
    stored = backend.get("ResourceClaim", "default", "c")
    assert stored is not None
    assert stored["metadata"]["creationTimestamp"] == "2024-05-01T10:00:00Z"
    assert backend.store.claims["default/c"].deletion_timestamp == "2024-05-02T10:00:00Z"


def test_malformed_claim_names_the_object() -> None:
    raw = claim(name="broken", namespace="team-a")
    raw["spec"]["devices"]["requests"] = "not-a-list"
    with pytest.raises(InvalidObject, match="ResourceClaim team-a/broken"):
        EmbeddedBackend([raw])


def test_malformed_class_names_the_object() -> None:
    raw = device_class("bad")
    raw["spec"]["selectors"] = {"cel": "x"}
    with pytest.raises(InvalidObject, match="DeviceClass bad"):
        EmbeddedBackend([raw])


def test_malformed_slice_is_kept_as_an_invalid_pool() -> None:
    raw = node_slice()
    raw["spec"]["devices"] = [{"name": "gpu-0"}, {"name": "gpu-0"}]  # duplicate device names
    backend = EmbeddedBackend([raw])
    assert backend.store.slices["node-1-gpus"].invalid_reason


def test_duplicate_objects_are_refused() -> None:
    with pytest.raises(InvalidObject, match="ResourceClaim default/claim-0: defined more than once"):
        EmbeddedBackend([claim(), claim()])


def test_objects_without_kind_or_name_are_refused() -> None:
    with pytest.raises(InvalidObject, match="kind is required"):
        EmbeddedBackend([{"metadata": {"name": "x"}}])
    with pytest.raises(InvalidObject, match=r"DeviceClass: metadata\.name: required"):
        EmbeddedBackend([{"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {}}])


def test_unsupported_dra_version_is_refused() -> None:
    raw = claim()
    raw["apiVersion"] = "resource.k8s.io/v2"
    with pytest.raises(InvalidObject, match="unsupported apiVersion"):
        EmbeddedBackend([raw])


def test_template_and_pod_from_manifests(tmp_path: Path) -> None:
    path = write_yaml(
        tmp_path / "x.yaml",
        device_class(),
        template(),
        pod(claims=[{"name": "gpu", "resourceClaimTemplateName": "gpu-template"}]),
    )
    backend = EmbeddedBackend.from_paths(path)
    assert set(backend.store.templates) == {"default/gpu-template"}
    assert len(backend.store.claims) == 1
    assert backend.store.pods["default/pod-0"]["status"]["resourceClaimStatuses"][0]["name"] == "gpu"


def test_node_labels_from_a_request_are_taken_once() -> None:
    from extender.backends.embedded import EmbeddedBackend

    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1", "labels": {"a": "1"}}}
    backend = EmbeddedBackend([node])
    sent = [{"metadata": {"name": "node-1", "labels": {"a": "1", "gpu": "yes"}}}, {"metadata": {"name": "node-9"}}]
    backend.observe_nodes(sent)
    assert backend.store.nodes["node-1"].labels == {"a": "1", "gpu": "yes"}
    assert backend.get("Node", None, "node-1")["metadata"]["labels"] == {"a": "1", "gpu": "yes"}  # type: ignore[index]
    assert "node-9" in backend.store.nodes  # a node only the request knows
    revision = backend.store.revision
    backend.observe_nodes(sent)
    assert backend.store.revision == revision  # unchanged labels: no write, caches stay warm
