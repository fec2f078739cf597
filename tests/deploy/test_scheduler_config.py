"""The KubeSchedulerConfiguration shipped in deploy/ (plain and TLS variants).

Checked three ways: (1) against kube-scheduler's own rules — strict decoding of the v1 fields and
the checks of ``pkg/scheduler/apis/config/validation`` (at most one binder, a positive weight with a
prioritize verb, valid and unique managedResources names, percentageOfNodesToScore in 0..100,
distinct scheduler names, complete leader election) — re-implemented here and shown to reject bad
configurations; (2) against this project's deployment rules (spec extender-protocol-and-peers.md
A.3-A.9: DynamicResources off in the extender's profile, all nodes scored, nodeCacheCapable, never
ignorable, a bind-sized timeout, its own Lease); (3) against the server: every configured verb is a
POST route of the app ``create_app`` builds with the sidecar's own command-line arguments, at the
urlPrefix's path, on the host and port the sidecar listens on.
"""

from __future__ import annotations

import copy
import re
from typing import Any
from urllib.parse import urlsplit

import pytest

from extender.cli import _parser
from extender.server import ServerSettings, create_app
from extender.server.settings import normalize_prefix
from tests.deploy.render import DEPLOY, container, find, go_duration_seconds, render, scheduler_config
from tests.server.fakes import FakeService

VARIANTS = {"plain": DEPLOY, "tls": DEPLOY / "tls", "large-cluster": DEPLOY / "large-cluster"}
SCHEDULER_NAME = "dra-extender-scheduler"

# Fields of kubescheduler.config.k8s.io/v1 (staging/src/k8s.io/kube-scheduler/config/v1/types.go).
# kube-scheduler decodes its configuration strictly: an unknown field stops it at startup.
_TOP = {
    "apiVersion", "kind", "parallelism", "leaderElection", "clientConnection", "enableProfiling",
    "enableContentionProfiling", "percentageOfNodesToScore", "podInitialBackoffSeconds", "podMaxBackoffSeconds",
    "profiles", "extenders", "delayCacheUntilActive",
}  # fmt: skip
_LEADER = {"leaderElect", "leaseDuration", "renewDeadline", "retryPeriod", "resourceLock", "resourceName",
           "resourceNamespace"}  # fmt: skip
_PROFILE = {"schedulerName", "percentageOfNodesToScore", "plugins", "pluginConfig"}
_PLUGINS = {"preEnqueue", "queueSort", "preFilter", "filter", "postFilter", "preScore", "score", "reserve",
            "permit", "preBind", "bind", "postBind", "multiPoint"}  # fmt: skip
_EXTENDER = {"urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "weight", "bindVerb", "enableHTTPS",
             "tlsConfig", "httpTimeout", "nodeCacheCapable", "managedResources", "ignorable"}  # fmt: skip
_TLS = {"insecure", "serverName", "certFile", "keyFile", "caFile", "certData", "keyData", "caData"}
_QUALIFIED_NAME = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                             r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")  # fmt: skip


def _unknown(obj: dict[str, Any], known: set[str], where: str) -> list[str]:
    return [f"{where}: unknown field {key!r}" for key in sorted(set(obj) - known)]


def _extended_resource_name_errors(name: str, where: str) -> list[str]:
    """validateExtendedResourceName: a domain-prefixed name outside kubernetes.io that is a
    qualified name also with the quota prefix ``requests.`` in front."""
    native = "/" not in name or "kubernetes.io/" in name
    prefixed = "requests." + name
    if native or name.startswith("requests.") or not _QUALIFIED_NAME.match(prefixed) or len(prefixed) > 316:
        return [f"{where}: {name!r} is an invalid extended resource name"]
    return []


def upstream_errors(config: dict[str, Any]) -> list[str]:
    """The errors kube-scheduler would report for this v1 configuration (empty: it starts)."""
    errors: list[str] = []
    kind = (config.get("apiVersion"), config.get("kind"))
    if kind != ("kubescheduler.config.k8s.io/v1", "KubeSchedulerConfiguration"):
        errors.append("not a kubescheduler.config.k8s.io/v1 KubeSchedulerConfiguration")
    errors += _unknown(config, _TOP, "")
    for where, pct in [("percentageOfNodesToScore", config.get("percentageOfNodesToScore"))] + [
        (f"profiles[{i}].percentageOfNodesToScore", p.get("percentageOfNodesToScore"))
        for i, p in enumerate(config.get("profiles", []))
    ]:
        if pct is not None and not 0 <= pct <= 100:
            errors.append(f"{where}: not in valid range [0-100]")
    leader = config.get("leaderElection", {})
    errors += _unknown(leader, _LEADER, "leaderElection")
    if leader.get("leaderElect", True):
        for key in ("resourceLock", "resourceName", "resourceNamespace"):
            if key in leader and not leader[key]:
                errors.append(f"leaderElection.{key}: required")
        durations = {k: go_duration_seconds(leader[k]) for k in ("leaseDuration", "renewDeadline", "retryPeriod")
                     if k in leader}  # fmt: skip
        if durations.get("leaseDuration", 15) <= durations.get("renewDeadline", 10):
            errors.append("leaderElection.leaseDuration: must be greater than renewDeadline")
    names: set[str] = set()
    for i, profile in enumerate(config.get("profiles", [])):
        where = f"profiles[{i}]"
        errors += _unknown(profile, _PROFILE, where)
        errors += _unknown(profile.get("plugins", {}), _PLUGINS, f"{where}.plugins")
        name = profile.get("schedulerName", "")
        if not name:
            errors.append(f"{where}.schedulerName: required")
        elif name in names:
            errors.append(f"{where}.schedulerName: duplicate {name!r}")
        names.add(name)
    binders = 0
    managed: set[str] = set()
    for i, extender in enumerate(config.get("extenders", [])):
        where = f"extenders[{i}]"
        errors += _unknown(extender, _EXTENDER, where)
        errors += _unknown(extender.get("tlsConfig", {}), _TLS, f"{where}.tlsConfig")
        if extender.get("prioritizeVerb") and extender.get("weight", 0) <= 0:
            errors.append(f"{where}.weight: must have a positive weight applied to it")
        if extender.get("bindVerb"):
            binders += 1
        for j, resource in enumerate(extender.get("managedResources", [])):
            rwhere = f"{where}.managedResources[{j}].name"
            errors += _extended_resource_name_errors(resource.get("name", ""), rwhere)
            if resource.get("name") in managed:
                errors.append(f"{rwhere}: duplicate extender managed resource name")
            managed.add(resource.get("name", ""))
        if "httpTimeout" in extender:
            try:
                go_duration_seconds(extender["httpTimeout"])
            except ValueError as exc:
                errors.append(f"{where}.httpTimeout: {exc}")
    if binders > 1:
        errors.append(f"extenders: found {binders} extenders implementing bind; only one extender can implement bind")
    return errors


@pytest.fixture(params=sorted(VARIANTS))
def variant(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


def _docs(variant: str) -> list[dict[str, Any]]:
    return render(VARIANTS[variant])


# --- (1) upstream validation -------------------------------------------------------------------------


def test_config_passes_upstream_validation(variant: str) -> None:
    assert upstream_errors(scheduler_config(_docs(variant))) == []


def _mutated(change: str) -> dict[str, Any]:
    config = copy.deepcopy(scheduler_config(_docs("plain")))
    extender = config["extenders"][0]
    if change == "two binders":
        config["extenders"].append({**extender, "urlPrefix": "http://127.0.0.1:9999/"})
    elif change == "zero weight":
        extender["weight"] = 0
    elif change == "native managed resource":
        extender["managedResources"] = [{"name": "cpu"}]
    elif change == "kubernetes.io managed resource":
        extender["managedResources"] = [{"name": "kubernetes.io/gpu"}]
    elif change == "duplicate managed resource":
        other = {"urlPrefix": "http://x/", "filterVerb": "f", "managedResources": [{"name": "a.io/b"}]}
        config["extenders"].append(other)
        extender["managedResources"] = [{"name": "a.io/b"}]
    elif change == "percentage above 100":
        config["profiles"][0]["percentageOfNodesToScore"] = 101
    elif change == "typo in a field":
        extender["nodeCachecapable"] = True
    elif change == "duplicate profile":
        config["profiles"].append(copy.deepcopy(config["profiles"][0]))
    elif change == "bad duration":
        extender["httpTimeout"] = "30"
    return config


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("two binders", "only one extender can implement bind"),
        ("zero weight", "must have a positive weight"),
        ("native managed resource", "invalid extended resource name"),
        ("kubernetes.io managed resource", "invalid extended resource name"),
        ("duplicate managed resource", "duplicate extender managed resource name"),
        ("percentage above 100", "not in valid range"),
        ("typo in a field", "unknown field 'nodeCachecapable'"),
        ("duplicate profile", "duplicate 'dra-extender-scheduler'"),
        ("bad duration", "invalid duration"),
    ],
)
def test_upstream_validation_catches(change: str, message: str) -> None:
    errors = upstream_errors(_mutated(change))
    assert any(message in e for e in errors), errors


def test_valid_managed_resource_name_passes() -> None:
    assert _extended_resource_name_errors("dra-extender.io/claims", "x") == []


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30), ("1m30s", 90), ("1.5h", 5400), ("500ms", 0.5), ("0", 0)])
def test_go_duration(text: str, seconds: float) -> None:
    assert go_duration_seconds(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["30", "", "s", "1x", "30 s"])
def test_go_duration_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        go_duration_seconds(text)


# --- (2) the deployment's own rules --------------------------------------------------------------


def test_one_profile_for_the_extender_with_dynamic_resources_off(variant: str) -> None:
    """Two allocators for one pod would race (one-owner rule): the in-tree plugin must be off at
    every extension point of the profile whose pods the extender allocates for."""
    config = scheduler_config(_docs(variant))
    (profile,) = config["profiles"]
    assert profile["schedulerName"] == SCHEDULER_NAME
    plugins = profile["plugins"]
    assert {"name": "DynamicResources"} in plugins["multiPoint"]["disabled"]
    for point, sets in plugins.items():
        enabled = [p["name"] for p in sets.get("enabled", [])]
        assert "DynamicResources" not in enabled, f"DynamicResources re-enabled at {point}"


def test_every_node_is_scored(variant: str) -> None:
    """Node sampling could hide every device-bearing node from the extender's filter: only the
    large-cluster variant samples, by choice (docs/deploy.md, "Large clusters")."""
    if variant == "large-cluster":
        return  # test_the_large_cluster_variant_samples_and_drops_only_resource_scores
    config = scheduler_config(_docs(variant))
    assert config["profiles"][0]["percentageOfNodesToScore"] == 100
    assert config.get("percentageOfNodesToScore") in (None, 100)


def test_the_large_cluster_variant_samples_and_drops_only_resource_scores() -> None:
    """The large-cluster variant is the base with an explicit sample (not kube-scheduler's adaptive
    one, which falls to 5 % at 11 250 nodes and more) and without the in-tree scores of free CPU,
    memory and images; the pod's own preferences (affinity, taints, topology spread) still score,
    and the extender entry is the base's."""
    base, large = scheduler_config(_docs("plain")), scheduler_config(_docs("large-cluster"))
    (profile,) = large["profiles"]
    assert 10 <= profile["percentageOfNodesToScore"] < 100
    assert large.get("percentageOfNodesToScore") is None
    assert large["extenders"] == base["extenders"]
    assert large["leaderElection"] == base["leaderElection"]
    plugins = profile["plugins"]
    dropped = {p["name"] for point in ("preScore", "score") for p in plugins[point]["disabled"]}
    assert dropped == {"NodeResourcesFit", "NodeResourcesBalancedAllocation", "ImageLocality"}
    for point in ("filter", "preFilter", "multiPoint"):
        kept = {p["name"] for p in plugins.get(point, {}).get("disabled", [])}
        assert kept <= {"DynamicResources"}, f"{point}: a filter of the base must stay on"


def test_the_large_cluster_variants_extender_picks_the_node_in_its_filter() -> None:
    """The one extender flag the variant adds (docs/deploy.md): the sidecar's filter names the
    node for pods without soft preferences, so kube-scheduler scores nothing for them."""
    args = {name: container(find(_docs(name), "Deployment", "dra-extender-scheduler"), "extender")["args"]
            for name in ("plain", "large-cluster")}  # fmt: skip
    assert args["large-cluster"] == [*args["plain"], "--filter-picks-node"]


def test_extender_entry(variant: str) -> None:
    (extender,) = scheduler_config(_docs(variant))["extenders"]
    assert extender["nodeCacheCapable"] is True
    assert extender["ignorable"] is False
    assert extender["weight"] > 0
    assert {"filterVerb", "prioritizeVerb", "preemptVerb", "bindVerb"} <= set(extender)
    assert "managedResources" not in extender, "every pod of the profile must reach the extender"
    # bind writes each claim (finalizer, status with conflict retries) before the Binding.
    assert go_duration_seconds(extender["httpTimeout"]) >= 15


def test_own_lease(variant: str) -> None:
    leader = scheduler_config(_docs(variant))["leaderElection"]
    assert leader["leaderElect"] is True
    assert leader["resourceName"] not in ("", "kube-scheduler"), "would fight the default scheduler for its Lease"
    assert leader["resourceNamespace"] == "dra-extender"


def test_examples_use_the_scheduler_name() -> None:
    from tests.deploy.render import load_documents

    pods = 0
    for path in sorted((DEPLOY / "examples").glob("*.yaml")):
        if path.name == "demo-cluster.yaml":
            continue
        for doc in load_documents(path):
            spec = doc["spec"]["template"]["spec"] if doc["kind"] == "Deployment" else doc.get("spec", {})
            if doc["kind"] in ("Pod", "Deployment"):
                pods += 1
                assert spec["schedulerName"] == SCHEDULER_NAME, f"{path.name}: {doc['metadata']['name']}"
                assert spec.get("resourceClaims"), f"{path.name}: {doc['metadata']['name']} uses no claim"
    assert pods >= 3


# --- (3) the configuration against the server ----------------------------------------------------


def _sidecar_args(variant: str) -> Any:
    deployment = find(_docs(variant), "Deployment", "dra-extender-scheduler")
    return _parser().parse_args(container(deployment, "extender")["args"])


def test_verbs_are_routes_of_the_server(variant: str) -> None:
    args = _sidecar_args(variant)
    app = create_app(FakeService().as_service(), ServerSettings(path_prefix=args.path_prefix))
    posts = {r.resource.canonical for r in app.router.routes() if r.method == "POST" and r.resource is not None}
    (extender,) = scheduler_config(_docs(variant))["extenders"]
    url = urlsplit(extender["urlPrefix"])
    verbs = [extender[k] for k in ("filterVerb", "prioritizeVerb", "bindVerb", "preemptVerb") if extender.get(k)]
    assert len(verbs) == 4
    for verb in verbs:
        # kube-scheduler: strings.TrimRight(urlPrefix, "/") + "/" + verb
        path = url.path.rstrip("/") + "/" + verb
        assert path in posts, f"{verb}: POST {path} is not served (routes: {sorted(posts)})"
        assert path.startswith(normalize_prefix(args.path_prefix))


def test_url_points_at_the_sidecar(variant: str) -> None:
    args = _sidecar_args(variant)
    (extender,) = scheduler_config(_docs(variant))["extenders"]
    url = urlsplit(extender["urlPrefix"])
    assert (url.hostname, url.port) == args.listen
    assert args.listen == ("127.0.0.1", ServerSettings().port), "the sidecar keeps the default loopback address"
    tls = bool(args.tls_cert_file)
    assert url.scheme == ("https" if tls else "http")
    assert ("tlsConfig" in extender) == tls


def test_tls_files_are_mounted_where_both_sides_look() -> None:
    docs = _docs("tls")
    deployment = find(docs, "Deployment", "dra-extender-scheduler")
    (extender,) = scheduler_config(docs)["extenders"]
    tls = extender["tlsConfig"]
    assert tls.get("insecure", False) is False and tls["caFile"] and tls["certFile"] and tls["keyFile"]
    args = _sidecar_args("tls")
    assert args.tls_cert_file and args.tls_key_file and args.tls_client_ca_file, "mutual TLS"

    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}

    def files_of(container_name: str) -> set[str]:
        files: set[str] = set()
        for mount in container(deployment, container_name).get("volumeMounts", []):
            secret = volumes[mount["name"]].get("secret")
            if secret:
                assert secret["secretName"] == "dra-extender-tls"
                files |= {f"{mount['mountPath']}/{item['path']}" for item in secret["items"]}
        return files

    assert {tls["caFile"], tls["certFile"], tls["keyFile"]} <= files_of("kube-scheduler")
    assert {args.tls_cert_file, args.tls_key_file, args.tls_client_ca_file} <= files_of("extender")
    assert "server.key" not in " ".join(files_of("kube-scheduler")), "the scheduler never needs the server key"
