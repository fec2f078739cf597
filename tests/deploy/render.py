"""Loading and rendering the manifests under ``deploy/`` for the deployment tests.

``render(directory)`` is a small kustomize: it follows ``resources`` (files and directories),
applies ``patches`` (a patch file naming an object is merged into it as a map merge; a patch with a
``target`` is a list of JSON 6902 operations) and ``images``. It supports exactly what our
kustomizations use and raises on anything else, so the tests run without the kustomize binary;
``test_manifests`` compares it with ``kubectl kustomize`` where kubectl exists. Also here: helpers
to find objects, the parsed KubeSchedulerConfiguration, and Go duration parsing.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "DEPLOY",
    "ROOT",
    "apply_json_patch",
    "container",
    "find",
    "go_duration_seconds",
    "load_documents",
    "render",
    "scheduler_config",
]

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"

Doc = dict[str, Any]


def load_documents(path: Path) -> list[Any]:
    """Every non-empty YAML document of a file (objects; a JSON 6902 patch file is a list)."""
    with path.open(encoding="utf-8") as stream:
        return [doc for doc in yaml.safe_load_all(stream) if doc]


def _kustomization(directory: Path) -> Doc:
    (only,) = load_documents(directory / "kustomization.yaml")
    doc: Doc = only
    known = {"apiVersion", "kind", "resources", "patches", "images"}
    unknown = set(doc) - known
    if unknown:
        raise NotImplementedError(f"{directory}: render() does not know {sorted(unknown)}")
    return doc


def render(directory: Path) -> list[Doc]:
    """The objects ``kubectl kustomize directory`` would print (order: as listed)."""
    kustomization = _kustomization(directory)
    docs: list[Doc] = []
    for entry in kustomization.get("resources", []):
        path = (directory / entry).resolve()
        docs.extend(render(path) if path.is_dir() else load_documents(path))
    for patch in kustomization.get("patches", []):
        if set(patch) - {"path", "target"}:
            raise NotImplementedError(f"{directory}: patch fields {sorted(patch)}")
        content = load_documents(directory / patch["path"])
        if "target" in patch:
            target = patch["target"]
            obj = find(docs, target["kind"], target["name"])
            group, _, version = obj["apiVersion"].rpartition("/")
            assert (group, version) == (target.get("group", ""), target["version"]), f"{patch} targets {obj}"
            (ops,) = content  # one YAML document: the list of operations
            replaced = apply_json_patch(obj, list(ops))
            docs[docs.index(obj)] = replaced
        else:
            for part in content:
                obj = find(docs, part["kind"], part["metadata"]["name"], part["metadata"].get("namespace"))
                docs[docs.index(obj)] = _merge(obj, part)
    for image in kustomization.get("images", []):
        for doc in docs:
            for c in _containers(doc):
                name = c["image"].rsplit(":", 1)[0] if ":" in c["image"].rsplit("/", 1)[-1] else c["image"]
                if name == image["name"]:
                    c["image"] = f"{image.get('newName', name)}:{image['newTag']}"
    return docs


def _containers(doc: Doc) -> list[Doc]:
    spec = doc.get("spec", {})
    pod_spec = spec.get("template", {}).get("spec", spec if doc.get("kind") == "Pod" else {})
    containers: list[Doc] = pod_spec.get("containers", []) + pod_spec.get("initContainers", [])
    return containers


def _merge(base: Any, patch: Any) -> Any:
    """Map merge (a strategic merge without list merge keys: lists are replaced)."""
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = dict(base)
        for key, value in patch.items():
            merged[key] = _merge(base[key], value) if key in base else copy.deepcopy(value)
        return merged
    return copy.deepcopy(patch)


def _pointer(path: str) -> list[str]:
    if not path.startswith("/"):
        raise ValueError(f"JSON pointer {path!r} must start with /")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def apply_json_patch(doc: Doc, ops: Iterable[Doc]) -> Doc:
    """RFC 6902 add / replace / remove / test on a copy of ``doc``."""
    result = copy.deepcopy(doc)
    for op in ops:
        *parents, last = _pointer(op["path"])
        node: Any = result
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        kind = op["op"]
        if kind == "test":
            current = node[int(last)] if isinstance(node, list) else node[last]
            if current != op["value"]:
                raise ValueError(f"test failed at {op['path']}: {current!r} != {op['value']!r}")
        elif kind == "add":
            if isinstance(node, list):
                node.insert(len(node) if last == "-" else int(last), copy.deepcopy(op["value"]))
            else:
                node[last] = copy.deepcopy(op["value"])
        elif kind == "replace":
            if isinstance(node, list):
                node[int(last)] = copy.deepcopy(op["value"])
            else:
                if last not in node:
                    raise KeyError(f"replace of a missing member {op['path']}")
                node[last] = copy.deepcopy(op["value"])
        elif kind == "remove":
            del node[int(last) if isinstance(node, list) else last]
        else:
            raise NotImplementedError(f"JSON patch op {kind}")
    return result


def find(docs: Iterable[Doc], kind: str, name: str, namespace: str | None = None) -> Doc:
    """The one object of that kind and name (and namespace, if given)."""
    matches = [
        d
        for d in docs
        if d["kind"] == kind
        and d["metadata"]["name"] == name
        and (namespace is None or d["metadata"].get("namespace") == namespace)
    ]
    if len(matches) != 1:
        raise LookupError(f"{len(matches)} objects {kind} {namespace}/{name}")
    return matches[0]


def container(deployment: Doc, name: str) -> Doc:
    (match,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    found: Doc = match
    return found


def scheduler_config(docs: Iterable[Doc]) -> Doc:
    """The KubeSchedulerConfiguration inside the scheduler's ConfigMap."""
    config_map = find(docs, "ConfigMap", "dra-extender-scheduler-config")
    parsed: Doc = yaml.safe_load(config_map["data"]["config.yaml"])
    return parsed


_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def go_duration_seconds(text: str) -> float:
    """Go's time.ParseDuration (what metav1.Duration uses): ``30s``, ``1m30s``, ``1.5h``, ``0``."""
    body = text.strip()
    sign = -1.0 if body.startswith("-") else 1.0
    body = body.lstrip("+-")
    if body == "0":
        return 0.0
    if not body:
        raise ValueError(f"invalid duration {text!r}")
    total, position = 0.0, 0
    for match in _DURATION_PART.finditer(body):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    if position != len(body):
        raise ValueError(f"invalid duration {text!r}")
    return sign * total
