"""The manifests under deploy/: schema validity, kustomize layout, the pod's hardening, the
sidecar's probes against the server's real routes and port, and RBAC against the API calls the
Kubernetes backend makes.

Schemas: kubernetes-validate's strict JSON schemas of Kubernetes ``K8S_VERSION`` (unknown fields are
errors). Rendering: ``tests.deploy.render`` (compared with ``kubectl kustomize`` when kubectl is
installed). RBAC: the calls are read from ``extender/backends/kube`` (every request names its verb
and resource; reflectors list and watch each ``Resource``), plus the writes the issue requires.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate import utils as kv_utils

from extender.cli import _parser
from extender.server import ServerSettings, create_app
from tests.deploy.render import (
    DEPLOY,
    ROOT,
    container,
    find,
    load_documents,
    render,
    scheduler_config,
)
from tests.server.fakes import FakeService

#: The Kubernetes version the manifests are validated against; also the kube-scheduler minor.
K8S_VERSION = "1.36"
NAMESPACE = "dra-extender"
EXAMPLES = sorted(p for p in (DEPLOY / "examples").glob("*.yaml") if p.name != "demo-cluster.yaml")
VARIANTS = {
    "plain": DEPLOY,
    "tls": DEPLOY / "tls",
    "classic-dra": DEPLOY / "classic-dra",
    "large-cluster": DEPLOY / "large-cluster",
}
#: Granted only by the classic DRA overlay (Kubernetes 1.31 clusters with classic drivers).
CLASSIC_RESOURCES = {("resource.k8s.io", "podschedulingcontexts")}

Doc = dict[str, Any]


def _all_documents() -> list[tuple[str, Doc]]:
    docs: list[tuple[str, Doc]] = []
    for variant, directory in VARIANTS.items():
        docs += [(f"{variant}:{d['kind']}/{d['metadata']['name']}", d) for d in render(directory)]
    for path in EXAMPLES:
        docs += [(f"{path.name}:{d['kind']}/{d['metadata']['name']}", d) for d in load_documents(path)]
    return docs


# --- schemas ----------------------------------------------------------------------------------------


def test_validation_version_is_bundled() -> None:
    assert K8S_VERSION in {kv_utils.major_minor(v) for v in kv_utils.all_versions()}


@pytest.mark.parametrize(("where", "doc"), _all_documents(), ids=[w for w, _ in _all_documents()])
def test_manifest_validates_against_the_api_schema(where: str, doc: Doc) -> None:
    assert kubernetes_validate.validate(doc, K8S_VERSION, strict=True) == K8S_VERSION


def test_schema_check_is_strict() -> None:
    deployment = find(render(DEPLOY), "Deployment", "dra-extender-scheduler")
    container(deployment, "extender")["securityContext"]["readOnlyRootFileSystem"] = True  # misspelt
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)


# --- kustomize layout -------------------------------------------------------------------------------


def _kustomization(directory: Path) -> Doc:
    (only,) = load_documents(directory / "kustomization.yaml")
    doc: Doc = only
    return doc


def test_base_lists_exactly_its_files() -> None:
    base = DEPLOY / "base"
    files = sorted(p.name for p in base.iterdir() if p.name != "kustomization.yaml")
    assert sorted(_kustomization(base)["resources"]) == files


def test_top_level_installs_the_base_only() -> None:
    assert _kustomization(DEPLOY)["resources"] == ["base"]
    stray = [p.name for p in DEPLOY.iterdir() if p.is_file() and p.name != "kustomization.yaml"]
    assert stray == [], "manifests belong in base/ (installed) or examples/ (not installed)"
    folders = sorted(p.name for p in DEPLOY.iterdir() if p.is_dir())
    assert folders == ["base", "classic-dra", "examples", "large-cluster", "tls"]


def test_tls_overlay_lists_exactly_its_files() -> None:
    tls = DEPLOY / "tls"
    kustomization = _kustomization(tls)
    assert kustomization["resources"] == ["../base"]
    files = sorted(p.name for p in tls.iterdir() if p.name != "kustomization.yaml")
    assert sorted(p["path"] for p in kustomization["patches"]) == files


def test_image_override_matches_the_deployment() -> None:
    """``kustomize edit set image dra-extender=...`` only works if the names agree."""
    (image,) = _kustomization(DEPLOY / "base")["images"]
    (doc,) = [d for d in load_documents(DEPLOY / "base" / "deployment.yaml") if d["kind"] == "Deployment"]
    assert container(doc, "extender")["image"] == f"{image['name']}:{image['newTag']}"


def _key(doc: Doc) -> tuple[str, str, str]:
    return doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_render_matches_kubectl_kustomize(variant: str) -> None:
    out = subprocess.run(
        ["kubectl", "kustomize", str(VARIANTS[variant])], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    theirs = sorted((d for d in yaml.safe_load_all(out) if d), key=_key)
    ours = sorted(render(VARIANTS[variant]), key=_key)
    assert [_key(d) for d in ours] == [_key(d) for d in theirs]
    assert ours == theirs


# --- references between objects ---------------------------------------------------------------------


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_references_resolve(variant: str) -> None:
    docs = render(VARIANTS[variant])
    find(docs, "Namespace", NAMESPACE)
    for doc in docs:
        if doc["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
            expected = "kube-system" if doc["metadata"]["name"].endswith("authentication-reader") else NAMESPACE
            assert doc["metadata"].get("namespace") == expected, _key(doc)
    deployment = find(docs, "Deployment", "dra-extender-scheduler")
    pod = deployment["spec"]["template"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    account = pod["spec"]["serviceAccountName"]
    find(docs, "ServiceAccount", account, NAMESPACE)
    for volume in pod["spec"]["volumes"]:
        if "configMap" in volume:
            find(docs, "ConfigMap", volume["configMap"]["name"], NAMESPACE)
    pdb = find(docs, "PodDisruptionBudget", "dra-extender-scheduler")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert pdb["spec"]["minAvailable"] < deployment["spec"]["replicas"], "a drain must be able to evict one"
    for binding in (d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]
        ref = binding["roleRef"]
        if not ref["name"].startswith(("system:", "extension-apiserver-")):  # stock roles exist already
            find(docs, ref["kind"], ref["name"])


def test_scheduler_reads_the_config_map() -> None:
    docs = render(DEPLOY)
    deployment = find(docs, "Deployment", "dra-extender-scheduler")
    scheduler = container(deployment, "kube-scheduler")
    (config_arg,) = [a for a in scheduler["args"] if a.startswith("--config=")]
    config_path = Path(config_arg.removeprefix("--config="))
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    (mount,) = [m for m in scheduler["volumeMounts"] if Path(m["mountPath"]) == config_path.parent]
    config_map = find(docs, "ConfigMap", volumes[mount["name"]]["configMap"]["name"])
    assert config_path.name in config_map["data"]
    assert scheduler_config(docs)["kind"] == "KubeSchedulerConfiguration"


# --- the pod ----------------------------------------------------------------------------------------


def _pod_spec(variant: str = "plain") -> Doc:
    spec: Doc = find(render(VARIANTS[variant]), "Deployment", "dra-extender-scheduler")["spec"]["template"]["spec"]
    return spec


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_pod_is_hardened(variant: str) -> None:
    spec = _pod_spec(variant)
    pod_security = spec["securityContext"]
    assert pod_security["runAsNonRoot"] is True and pod_security["runAsUser"] > 0
    assert pod_security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not spec.get("hostNetwork") and not spec.get("hostPID") and not spec.get("hostIPC")
    for c in spec["containers"]:
        security = c["securityContext"]
        assert security["allowPrivilegeEscalation"] is False, c["name"]
        assert security["readOnlyRootFilesystem"] is True, c["name"]
        assert security["runAsNonRoot"] is True, c["name"]
        assert security["capabilities"] == {"drop": ["ALL"]}, c["name"]
        assert not security.get("privileged"), c["name"]
        for kind in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(c["resources"][kind]), f"{c['name']} {kind}"
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            assert probe in c, f"{c['name']} has no {probe}"


def test_stock_kube_scheduler_image_is_pinned() -> None:
    image = container({"spec": {"template": {"spec": _pod_spec()}}}, "kube-scheduler")["image"]
    match = re.fullmatch(r"registry\.k8s\.io/kube-scheduler:v(\d+)\.(\d+)\.(\d+)", image)
    assert match, f"{image}: not a pinned stock kube-scheduler"
    assert f"{match[1]}.{match[2]}" == K8S_VERSION


def test_scheduler_probes_use_its_secure_port() -> None:
    scheduler = container({"spec": {"template": {"spec": _pod_spec()}}}, "kube-scheduler")
    paths = {name: scheduler[name]["httpGet"] for name in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert {p["port"] for p in paths.values()} == {10259}
    assert {p["scheme"] for p in paths.values()} == {"HTTPS"}
    assert paths["readinessProbe"]["path"] == "/readyz" and paths["livenessProbe"]["path"] == "/livez"


def _served_gets(path_prefix: str) -> set[str]:
    app = create_app(FakeService().as_service(), ServerSettings(path_prefix=path_prefix))
    return {r.resource.canonical for r in app.router.routes() if r.method == "GET" and r.resource is not None}


def _probe_url(probe: Doc) -> str:
    """The URL an exec probe fetches: the one http(s) argument of its command."""
    (url,) = [str(a) for a in probe["exec"]["command"] if re.match(r"https?://", a)]
    return url


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_extender_probes_match_the_server(variant: str) -> None:
    """The kubelet cannot reach a loopback listener, so the probes run inside the container; they
    must fetch /healthz (alive) and /readyz (synced) where the sidecar actually listens."""
    extender = container({"spec": {"template": {"spec": _pod_spec(variant)}}}, "extender")
    args = _parser().parse_args(extender["args"])
    host, port = args.listen
    assert (host, port) == (ServerSettings().host, ServerSettings().port), "default loopback address"
    scheme = "https" if args.tls_cert_file else "http"
    gets = _served_gets(args.path_prefix)
    expected = {"startupProbe": "healthz", "livenessProbe": "healthz", "readinessProbe": "readyz"}
    for name, route in expected.items():
        url = _probe_url(extender[name])
        assert url == f"{scheme}://{host}:{port}/{route}", name
        assert url.split(str(port), 1)[1] in gets, f"{name}: GET {url} is not served"
        assert extender[name]["exec"]["command"][:2] == ["python", "-c"], "the image's own interpreter"


def test_extender_runs_the_serve_command() -> None:
    extender = container({"spec": {"template": {"spec": _pod_spec()}}}, "extender")
    assert "command" not in extender, "the image's ENTRYPOINT (dra-extender) runs"
    args = _parser().parse_args(extender["args"])
    assert args.command == "serve"
    assert not args.cluster and not args.demo, "in a pod the extender watches the real cluster"


def test_replicas_roll_without_a_gap() -> None:
    deployment = find(render(DEPLOY), "Deployment", "dra-extender-scheduler")
    assert deployment["spec"]["replicas"] >= 2
    rolling = deployment["spec"]["strategy"]["rollingUpdate"]
    assert rolling["maxUnavailable"] == 0 and rolling["maxSurge"] >= 1


# --- RBAC -------------------------------------------------------------------------------------------

#: What the issue requires of the extender's identity, whatever the code does today.
REQUIRED = {
    ("", "pods", "get"), ("", "pods", "list"), ("", "pods", "watch"), ("", "pods", "patch"),
    ("", "pods/binding", "create"), ("", "events", "create"), ("events.k8s.io", "events", "create"),
    ("", "events", "patch"),
    ("", "nodes", "get"), ("", "nodes", "list"), ("", "nodes", "watch"),
    ("resource.k8s.io", "resourceclaims", "get"), ("resource.k8s.io", "resourceclaims", "list"),
    ("resource.k8s.io", "resourceclaims", "watch"), ("resource.k8s.io", "resourceclaims", "update"),
    ("resource.k8s.io", "resourceclaims", "patch"),
    ("resource.k8s.io", "resourceclaims/status", "update"), ("resource.k8s.io", "resourceclaims/status", "patch"),
    ("resource.k8s.io", "resourceclaims/binding", "update"), ("resource.k8s.io", "resourceclaims/binding", "patch"),
    ("resource.k8s.io", "resourceslices", "get"), ("resource.k8s.io", "resourceslices", "list"),
    ("resource.k8s.io", "resourceslices", "watch"),
    ("resource.k8s.io", "deviceclasses", "get"), ("resource.k8s.io", "deviceclasses", "list"),
    ("resource.k8s.io", "deviceclasses", "watch"),
    ("resource.k8s.io", "resourceclaimtemplates", "get"), ("resource.k8s.io", "resourceclaimtemplates", "list"),
    ("resource.k8s.io", "resourceclaimtemplates", "watch"),
}  # fmt: skip

KUBE_BACKEND = ROOT / "extender" / "backends" / "kube"
GROUP_CONSTANTS = {"GROUP": "resource.k8s.io", "SCHEDULING_GROUP": "scheduling.k8s.io"}


def _string(node: ast.expr | None) -> str | None:
    """A constant string, or an f-string over known constants; None when dynamic."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts: list[str] = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            elif isinstance(value, ast.FormattedValue) and isinstance(value.value, ast.Name):
                if value.value.id not in GROUP_CONSTANTS:
                    return None
                parts.append(GROUP_CONSTANTS[value.value.id])
            else:
                return None
        return "".join(parts)
    return None


def _group_only(node: ast.expr) -> str:
    """The group of a version built as ``f"{GROUP_CONSTANT}/{discovered}"``; resource.k8s.io for
    any other dynamic version (the backend's discovered ``api_version``)."""
    if isinstance(node, ast.JoinedStr) and node.values:
        first = node.values[0]
        if isinstance(first, ast.FormattedValue) and isinstance(first.value, ast.Name):
            return GROUP_CONSTANTS.get(first.value.id, "resource.k8s.io")
    return "resource.k8s.io"


def _split_resource(text: str) -> tuple[str, str]:
    """``resourceclaims.resource.k8s.io/status`` -> (``resource.k8s.io``, ``resourceclaims/status``)."""
    name, _, sub = text.partition("/")
    plural, _, group = name.partition(".")
    return group, f"{plural}/{sub}" if sub else plural


def backend_api_calls() -> set[tuple[str, str, str]]:
    """(group, resource, verb) of every API request in the Kubernetes backend's source."""
    calls: set[tuple[str, str, str]] = set()
    for path in sorted(KUBE_BACKEND.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            keywords = {k.arg: k.value for k in node.keywords if k.arg}
            verb, resource = _string(keywords.get("verb")), _string(keywords.get("resource"))
            if verb and resource and not resource.startswith("/"):  # "/version", "/apis/...": discovery
                group, name = _split_resource(resource)
                calls.add((group, name, verb))
            func = node.func
            if isinstance(func, ast.Name) and func.id == "Resource" and len(node.args) >= 3:
                # A reflector kind: listed, then watched. The version argument names the group.
                version, plural = _string(node.args[1]), _string(node.args[2])
                if plural:
                    group = version.rpartition("/")[0] if version else _group_only(node.args[1])
                    calls |= {(group, plural, "list"), (group, plural, "watch")}
    return calls


def _allows(rules: list[Doc], group: str, resource: str, verb: str, name: str | None = None) -> bool:
    return any(
        group in rule.get("apiGroups", [])
        and resource in rule.get("resources", [])
        and verb in rule["verbs"]
        and (not rule.get("resourceNames") or name in rule["resourceNames"])
        for rule in rules
    )


def _extender_rules(docs: list[Doc]) -> list[Doc]:
    rules: list[Doc] = find(docs, "ClusterRole", "dra-extender")["rules"]
    return rules


def test_backend_calls_are_found() -> None:
    """The scan below is only worth something if it sees the backend's calls."""
    calls = backend_api_calls()
    assert ("", "pods/binding", "create") in calls
    assert ("resource.k8s.io", "resourceslices", "watch") in calls


def test_rbac_covers_every_api_call() -> None:
    docs = render(DEPLOY)
    rules = _extender_rules(docs)
    classic_rules: list[Doc] = find(render(DEPLOY / "classic-dra"), "ClusterRole", "dra-extender-classic-dra")["rules"]
    lease_rules: list[Doc] = find(docs, "Role", "dra-extender-leader-election", NAMESPACE)["rules"]
    leases = {("coordination.k8s.io", "leases")}
    missing = []
    for group, resource, verb in sorted(REQUIRED | backend_api_calls()):
        if (group, resource) in leases:
            lease = scheduler_config(docs)["leaderElection"]
            assert lease["resourceNamespace"] == NAMESPACE
            if not _allows(lease_rules, group, resource, verb, lease["resourceName"]):
                missing.append((group, resource, verb))
        elif (group, resource) in CLASSIC_RESOURCES:
            if not _allows(classic_rules, group, resource, verb):
                missing.append((group, resource, verb))
        elif not _allows(rules, group, resource, verb):
            missing.append((group, resource, verb))
    assert missing == []


def test_classic_dra_overlay_grants_only_the_contexts() -> None:
    """The base stays least-privilege; the overlay adds exactly what classic DRA uses."""
    base = {(g, r) for rule in _extender_rules(render(DEPLOY)) for g in rule["apiGroups"] for r in rule["resources"]}
    assert not base & CLASSIC_RESOURCES
    docs = render(DEPLOY / "classic-dra")
    granted = {
        (g, r, v)
        for rule in find(docs, "ClusterRole", "dra-extender-classic-dra")["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    used = {(g, r, v) for g, r, v in backend_api_calls() if (g, r) in CLASSIC_RESOURCES}
    assert granted == used


def test_rbac_has_no_wildcards_and_no_extras() -> None:
    docs = render(DEPLOY)
    granted = set()
    for rule in _extender_rules(docs):
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[field]
        granted |= {(g, r, v) for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    extras = granted - REQUIRED - backend_api_calls()
    assert extras == set(), "granted but neither required nor used"
    role = find(docs, "Role", "dra-extender-leader-election", NAMESPACE)
    for rule in role["rules"]:
        assert rule["resources"] == ["leases"]
        assert "resourceNames" in rule or rule["verbs"] == ["create"], "only create may go unnamed"


def test_kube_scheduler_gets_the_stock_roles() -> None:
    docs = render(DEPLOY)
    cluster = {d["roleRef"]["name"] for d in docs if d["kind"] == "ClusterRoleBinding"}
    assert {"system:kube-scheduler", "system:volume-scheduler", "dra-extender"} <= cluster
    reader = [d for d in docs if d["kind"] == "RoleBinding" and d["metadata"]["namespace"] == "kube-system"]
    assert [d["roleRef"] for d in reader] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "extension-apiserver-authentication-reader"}
    ]
    # system:kube-scheduler's own lease rule names only "kube-scheduler": ours needs the Role.
    lease = scheduler_config(docs)["leaderElection"]
    role_rules = find(docs, "Role", "dra-extender-leader-election", NAMESPACE)["rules"]
    for verb in ("get", "update"):
        assert _allows(role_rules, "coordination.k8s.io", "leases", verb, lease["resourceName"])
    assert _allows(role_rules, "coordination.k8s.io", "leases", "create")
