"""``kubectl dra`` (``extender/kubectl``) from both sources: the strict fake API server through a
kubeconfig (one LIST per kind, nothing written), and a running extender over loopback HTTP (the
embedded demo cluster). ``why``, ``devices`` and ``simulate`` in every output format, and every
error path: one line on stderr, exit code 1, no traceback."""

from __future__ import annotations

import asyncio
import io
import shlex
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from bench.pipeline import kubeconfig_text
from extender.backends.embedded import EmbeddedBackend
from extender.kubectl import run
from extender.manifests import load_manifests
from extender.server import create_app
from extender.state.service import SchedulingService
from extender.views.debug import DebugViews
from tests.fakes import FakeApiServer

ROOT = Path(__file__).parents[2]
CLUSTER = ROOT / "tests" / "server" / "fixtures" / "why-cluster.yaml"
DEMO = ROOT / "deploy" / "examples" / "demo-cluster.yaml"
JOBS = ROOT / "docs" / "examples" / "simulate-jobs.yaml"
LISTED = ("nodes", "deviceclasses", "resourceslices", "resourceclaimtemplates", "resourceclaims", "pods")


class Result:
    def __init__(self, code: int, out: str, err: str) -> None:
        self.code, self.out, self.err = code, out, err

    def json(self) -> Any:
        return orjson.loads(self.out)


async def kubectl_dra(*argv: str) -> Result:
    out, err = io.StringIO(), io.StringIO()
    code = await run(list(argv), out=out, err=err)
    return Result(code, out.getvalue(), err.getvalue())


def assert_one_line_error(result: Result, *fragments: str) -> None:
    assert result.code == 1, result.out
    assert result.out == ""
    lines = result.err.splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith("error: "), lines[0]
    assert "Traceback" not in result.err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


# --- fixtures -------------------------------------------------------------------------------------


@pytest.fixture
async def fake(aiohttp_server: Any) -> FakeApiServer:
    server = FakeApiServer(bookmark_interval=None)
    for obj in load_manifests(CLUSTER):
        server.put_object(obj)
    await server.serve_with(aiohttp_server)
    server.clear_requests()
    return server


@pytest.fixture
def kubeconfig(tmp_path: Path, fake: FakeApiServer) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(kubeconfig_text(fake.url), encoding="utf-8")
    return str(path)


@pytest.fixture
async def extender(aiohttp_server: Callable[..., Awaitable[Any]]) -> str:
    """A running extender over the embedded demo cluster; its URL."""
    service = SchedulingService(backend=EmbeddedBackend.from_paths(DEMO), hold_seconds=0)
    server = await aiohttp_server(create_app(service))
    return str(server.make_url("/"))


# --- why ------------------------------------------------------------------------------------------


async def test_why_from_the_cluster(kubeconfig: str) -> None:
    result = await kubectl_dra("why", "default/big-job", "--kubeconfig", kubeconfig)
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0] == (
        "Pod default/big-job: 0/3 nodes are available: 2 cannot allocate all claims, 1 no devices of the "
        "requested device classes on the node. preemption: 1/2 nodes would fit after evicting lower-priority pods."
    )
    assert "Closest nodes:" in lines
    closest = lines.index("Closest nodes:")
    assert lines[closest + 1].startswith("  node-a: ")
    assert "held by default/busy (pod default/holder)" in result.out
    assert "preempting on node-a would make room: evict default/holder (priority 0)" in result.out
    assert result.err == ""


async def test_why_lists_each_kind_once_and_writes_nothing(kubeconfig: str, fake: FakeApiServer) -> None:
    result = await kubectl_dra("why", "big-job", "-n", "default", "--kubeconfig", kubeconfig)
    assert result.code == 0, result.err
    lists = [r for r in fake.requests if r.method == "GET" and r.path.rsplit("/", 1)[-1] in LISTED]
    assert sorted(r.path.rsplit("/", 1)[-1] for r in lists) == sorted(LISTED)
    assert not any(r.is_watch for r in fake.requests)
    assert {r.method for r in fake.requests} == {"GET"}
    assert len(fake.requests) == len(LISTED) + 3  # + discovery: /version, the group, its version


async def test_why_json_is_the_endpoint_document(kubeconfig: str, extender: str) -> None:
    """The same pod from the cluster (explained locally) and from an extender over the same
    objects gives the same document."""
    local = (await kubectl_dra("why", "default/big-job", "--kubeconfig", kubeconfig, "-o", "json")).json()
    assert local["pod"] == "default/big-job"
    assert [c["node"] for c in local["closest"]] == ["node-a", "node-b", "node-c"]
    backend = EmbeddedBackend.from_paths(CLUSTER)
    from extender.views.why import why

    service = SchedulingService(backend=backend, hold_seconds=0)
    pod = backend.get("Pod", "default", "big-job")
    assert pod is not None
    served = why(DebugViews(service), pod, backend.store.known_node_names())
    for field in ("summary", "reasons", "fits", "bound", "error"):
        assert local[field] == served[field], field
    assert [s["kind"] for s in local["suggestions"]] == [s["kind"] for s in served["suggestions"]]


async def test_why_yaml_and_wide(kubeconfig: str) -> None:
    as_yaml = yaml.safe_load(
        (await kubectl_dra("why", "default/big-job", "--kubeconfig", kubeconfig, "-o", "yaml")).out
    )
    assert as_yaml["summary"].startswith("0/3 nodes are available")
    wide = await kubectl_dra("why", "default/big-job", "--kubeconfig", kubeconfig, "-o", "wide")
    assert "NODE     REQUESTS OK   SHORT   MISSING   DETAIL" in wide.out
    assert "  node-a   0/1           2       0" in wide.out


async def test_why_from_an_extender(extender: str) -> None:
    result = await kubectl_dra("why", "default/two-gpu-pod", "--extender", extender)
    assert result.code == 0, result.err
    assert result.out.splitlines()[0] == (
        "Pod default/two-gpu-pod: 3/4 nodes are available: 1 no devices of the requested device classes on the node."
    )
    assert "Fits on: node-2, node-3, node-4" in result.out
    doc = (await kubectl_dra("why", "two-gpu-pod", "--extender", extender, "-o", "json")).json()
    assert doc["fits"] == {"count": 3, "nodes": ["node-2", "node-3", "node-4"]}


async def test_why_of_a_bound_pod(extender: str) -> None:
    result = await kubectl_dra("why", "default/trainer", "--extender", extender)
    assert result.out.splitlines() == [
        "Pod default/trainer: the pod is bound to node node-2",
        "Claims: default/training-job",
    ]


# --- devices --------------------------------------------------------------------------------------


async def test_devices_from_the_cluster(kubeconfig: str) -> None:
    result = await kubectl_dra("devices", "--kubeconfig", kubeconfig)
    assert result.code == 0, result.err
    assert result.out.splitlines() == [
        "NODE     DRIVER            POOL     DEVICE   STATE       CLAIMS",
        "node-a   gpu.example.com   node-a   gpu-0    allocated   default/busy",
        "node-a   gpu.example.com   node-a   gpu-1    allocated   default/busy",
        "node-b   gpu.example.com   node-b   gpu-0    free        <none>",
        "node-c   nic.example.com   node-c   eth0     free        <none>",
    ]


async def test_devices_of_one_node_wide_json_yaml(kubeconfig: str) -> None:
    wide = await kubectl_dra("devices", "--node", "node-a", "-o", "wide", "--kubeconfig", kubeconfig)
    assert wide.out.splitlines()[1].split() == [
        "node-a",
        "gpu.example.com",
        "node-a",
        "gpu-0",
        "allocated",
        "default/busy",
        "default/holder",
        "model=h100",
        "memory=80Gi",
    ]
    listed = (await kubectl_dra("devices", "--node", "node-b", "-o", "json", "--kubeconfig", kubeconfig)).json()
    assert listed == {
        "kind": "DeviceList",
        "items": [
            {
                "node": "node-b",
                "driver": "gpu.example.com",
                "pool": "node-b",
                "device": "gpu-0",
                "state": "free",
                "claims": [],
                "pods": [],
                "attributes": {"model": "a100"},
                "capacity": {"memory": "40Gi"},
            }
        ],
    }
    as_yaml = yaml.safe_load((await kubectl_dra("devices", "-o", "yaml", "--kubeconfig", kubeconfig)).out)
    assert len(as_yaml["items"]) == 4


async def test_devices_from_an_extender(extender: str) -> None:
    result = await kubectl_dra("devices", "--extender", extender)
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].split() == ["NODE", "DRIVER", "POOL", "DEVICE", "STATE", "CLAIMS"]
    node_2 = [line.split() for line in lines if line.startswith("node-2   gpu.example.com")]
    assert [row[4] for row in node_2] == ["allocated"] * 4 + ["free"] * 4
    assert node_2[0][5] == "default/training-job"
    one = (await kubectl_dra("devices", "--node", "node-1", "-o", "json", "--extender", extender)).json()
    assert {row["node"] for row in one["items"]} == {"node-1"}
    assert one["items"][0]["attributes"]["model"] == "a100"
    # --node and -o wide read the device map's node detail: each claim's pods too
    wide = await kubectl_dra("devices", "--node", "node-2", "-o", "wide", "--extender", extender)
    assert wide.code == 0, wide.err
    held = [line.split() for line in wide.out.splitlines() if " allocated " in line]
    assert len(held) == 4 and {row[5:7] == ["default/training-job", "default/trainer"] for row in held} == {True}
    everything = (await kubectl_dra("devices", "-o", "json", "--extender", extender)).json()
    assert {row["node"] for row in everything["items"]} == {"node-1", "node-2", "node-3", "node-4"}
    assert_one_line_error(await kubectl_dra("devices", "--node", "node-z", "--extender", extender), "node-z")


# --- simulate -------------------------------------------------------------------------------------


SIMULATED = """
apiVersion: v1
kind: Pod
metadata: {name: one-more}
spec:
  containers: [{name: main, image: busybox}]
  resourceClaims: [{name: gpu, resourceClaimTemplateName: one-gpu}]
---
apiVersion: v1
kind: Pod
metadata: {name: and-another}
spec:
  containers: [{name: main, image: busybox}]
  resourceClaims: [{name: gpu, resourceClaimTemplateName: one-gpu}]
"""


async def test_simulate_against_the_cluster(kubeconfig: str, fake: FakeApiServer, tmp_path: Path) -> None:
    """The first pod takes node-b's only free GPU; the second then fits nowhere. Nothing is
    written to the cluster."""
    manifest = tmp_path / "pods.yaml"
    manifest.write_text(SIMULATED, encoding="utf-8")
    result = await kubectl_dra("simulate", "-f", str(manifest), "--kubeconfig", kubeconfig, "-o", "json")
    assert result.code == 0, result.err
    first, second = result.json()["pods"]
    assert first["pod"] == "default/one-more" and first["node"] == "node-b"
    assert [(d["pool"], d["device"]) for d in first["devices"]] == [("node-b", "gpu-0")]
    assert second["node"] is None
    assert second["summary"].startswith("0/3 nodes are available: 2 cannot allocate all claims")
    assert {r.method for r in fake.requests} == {"GET"}
    assert fake.get_object("Pod", "default", "one-more") is None
    text = await kubectl_dra("simulate", "-f", str(manifest), "--kubeconfig", kubeconfig)
    assert text.out.splitlines()[1].split() == ["default/one-more", "node-b", "gpu:", "gpu.example.com/node-b/gpu-0"]
    assert text.out.splitlines()[2].startswith("default/and-another   <none>   0/3 nodes are available")


async def test_simulate_against_an_extender(extender: str) -> None:
    result = await kubectl_dra("simulate", "-f", str(JOBS), "--extender", extender)
    assert result.code == 0, result.err
    rows = [line.split()[:2] for line in result.out.splitlines()[1:]]
    assert rows == [
        ["default/train-1", "node-2"],
        ["default/train-2", "node-3"],
        ["default/train-3", "node-3"],
        ["default/big-train", "<none>"],
    ]
    wide = await kubectl_dra("simulate", "-f", str(JOBS), "--extender", extender, "-o", "wide")
    assert "default/big-train: what would have to change:" in wide.out
    as_yaml = yaml.safe_load((await kubectl_dra("simulate", "-f", str(JOBS), "--extender", extender, "-o", "yaml")).out)
    assert as_yaml["kind"] == "Simulation"
    assert [p["node"] for p in as_yaml["pods"]] == ["node-2", "node-3", "node-3", None]


# --- errors: one line, exit code 1 ----------------------------------------------------------------


async def test_unreachable_api_server(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(kubeconfig_text("http://127.0.0.1:9"), encoding="utf-8")
    assert_one_line_error(await kubectl_dra("devices", "--kubeconfig", str(path)), "cannot reach the API server")


async def test_forbidden(kubeconfig: str, fake: FakeApiServer) -> None:
    fake.deny("list", "pods")
    assert_one_line_error(await kubectl_dra("why", "default/big-job", "--kubeconfig", kubeconfig), "pods", "list")


async def test_unknown_pod(kubeconfig: str, extender: str) -> None:
    assert_one_line_error(
        await kubectl_dra("why", "default/nobody", "--kubeconfig", kubeconfig),
        'pod "nobody" not found in namespace "default"',
    )
    assert_one_line_error(
        await kubectl_dra("why", "nobody", "--extender", extender), 'pod "nobody" not found in namespace "default"'
    )


async def test_unknown_node(kubeconfig: str) -> None:
    assert_one_line_error(await kubectl_dra("devices", "--node", "node-z", "--kubeconfig", kubeconfig), "node-z")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("kind: Pod\nmetadata: [unclosed", "pods.yaml"),
        ("apiVersion: v1\nkind: Pod\nspec: {}\n", "without metadata.name"),
        (
            "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: bad}\nspec: {devices: 7}\n"
            "---\napiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: []}\n",
            "ResourceClaim default/bad",
        ),
        ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n", "no pod to schedule"),
        ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {resourceClaims: 5}\n", "Pod default/p"),
    ],
)
async def test_bad_manifest(kubeconfig: str, tmp_path: Path, text: str, fragment: str) -> None:
    manifest = tmp_path / "pods.yaml"
    manifest.write_text(text, encoding="utf-8")
    result = await kubectl_dra("simulate", "-f", str(manifest), "--kubeconfig", kubeconfig)
    assert result.code == 1
    errors = [line for line in result.err.splitlines() if not line.startswith("warning: ")]
    assert len(errors) == 1 and errors[0].startswith("error: ") and fragment in errors[0], result.err


async def test_missing_manifest(kubeconfig: str) -> None:
    assert_one_line_error(
        await kubectl_dra("simulate", "-f", "/nonexistent/pods.yaml", "--kubeconfig", kubeconfig),
        "no such file or directory",
    )


@pytest.mark.parametrize("text", ["{not: [valid", "apiVersion: v1\nkind: Config\nclusters: []\n"])
async def test_bad_kubeconfig(tmp_path: Path, text: str) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(text, encoding="utf-8")
    assert_one_line_error(await kubectl_dra("devices", "--kubeconfig", str(path)), "cannot load", str(path))


async def test_missing_kubeconfig(tmp_path: Path) -> None:
    path = tmp_path / "absent"
    assert_one_line_error(await kubectl_dra("devices", "--kubeconfig", str(path)), "cannot load")


async def test_unreachable_extender() -> None:
    assert_one_line_error(
        await kubectl_dra("devices", "--extender", "http://127.0.0.1:9/"), "cannot reach the extender"
    )


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["why"], "required"),
        (["why", "a/b/c"], "not a pod name"),
        (["why", "ns/pod", "-n", "other"], "--namespace says other"),
        (["devices", "-o", "table"], "invalid choice"),
        (["simulate"], "required"),
        (["frobnicate"], "invalid choice"),
        (["why", "pod", "--extender", "localhost:8888"], "http:// or https://"),
        (["why", "pod", "--extender", "http://x", "--kubeconfig", "k"], "two sources"),
    ],
)
async def test_usage_errors(argv: list[str], fragment: str) -> None:
    assert_one_line_error(await kubectl_dra(*argv), fragment)


async def test_the_console_script(kubeconfig: str) -> None:
    """The installed ``kubectl-dra`` (as kubectl runs the plugin), in a process of its own."""
    script = Path(sys.executable).parent / "kubectl-dra"
    if not script.exists():
        pytest.skip("kubectl-dra is not installed in this environment (pip install -e .)")
    process = await asyncio.create_subprocess_exec(
        str(script),
        "why",
        "default/big-job",
        "--kubeconfig",
        kubeconfig,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    assert out.decode().startswith("Pod default/big-job: 0/3 nodes are available")
    assert err == b""  # the extender's own logs stay quiet
    process = await asyncio.create_subprocess_exec(
        str(script),
        "why",
        "default/nobody",
        "--kubeconfig",
        kubeconfig,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 1
    assert err.decode().splitlines() == ['error: pod "nobody" not found in namespace "default"']
    # a reader that goes away (``| head``; here ``| true``, which reads nothing): no traceback
    process = await asyncio.create_subprocess_shell(
        f"{shlex.quote(str(script))} devices --kubeconfig {shlex.quote(kubeconfig)} | true",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert err == b"", err.decode()


# --- the README's commands --------------------------------------------------------------------------


def readme_commands() -> list[list[str]]:
    """The commands of README.md's ``# kubectl-dra: the demo`` block, as argument lists."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("# kubectl-dra: the demo\n", 1)[1].split("```", 1)[0]
    commands = [shlex.split(line) for line in block.splitlines() if line.strip()]
    assert commands and all(c[:2] == ["kubectl", "dra"] for c in commands)
    return [c[2:] for c in commands]


async def test_readme_commands_run_against_the_demo(extender: str) -> None:
    for argv in readme_commands():
        argv = [extender if a == "http://localhost:8888" else a for a in argv]
        argv = [str(ROOT / a) if a.startswith("docs/") else a for a in argv]
        result = await kubectl_dra(*argv)
        assert result.code == 0, (argv, result.err)
        assert result.err == ""
        assert result.out.strip(), argv


# --- finding the kubeconfig as kubectl does -------------------------------------------------------


def _dead_kubeconfig(path: Path) -> str:
    """A kubeconfig whose current context is ``dead`` (nothing listens there)."""
    text = kubeconfig_text("http://127.0.0.1:9").replace("fake", "dead")
    path.write_text(text, encoding="utf-8")
    return str(path)


async def test_kubeconfig_of_several_files_and_a_context(
    kubeconfig: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``$KUBECONFIG`` may list several files (merged, the first current-context wins) and
    ``--context`` picks a context of any of them, as kubectl does."""
    dead = _dead_kubeconfig(tmp_path / "dead")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", f"{dead}:{tmp_path / 'absent'}:{kubeconfig}")
    result = await kubectl_dra("devices", "--context", "fake")
    assert result.code == 0, result.err
    assert "node-a" in result.out
    assert_one_line_error(await kubectl_dra("devices"), "127.0.0.1:9")


async def test_in_a_pod_an_explicit_kubeconfig_or_context_wins(
    kubeconfig: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kubectl uses the pod's service account only when no kubeconfig is given or found: with
    ``$KUBECONFIG`` set (or ``--context``), the kubeconfig is read, not the service account."""
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setenv("KUBECONFIG", kubeconfig)
    result = await kubectl_dra("devices")
    assert result.code == 0, result.err
    assert "node-a" in result.out
    monkeypatch.setenv("KUBECONFIG", f"{_dead_kubeconfig(tmp_path / 'dead')}:{kubeconfig}")
    result = await kubectl_dra("devices", "--context", "fake")
    assert result.code == 0, result.err


async def test_the_docs_example_of_the_demo_pod_that_fits_nowhere(extender: str) -> None:
    """docs/kubectl-dra.md shows ``why default/big-training`` on the demo: its text, as printed."""
    result = await kubectl_dra("why", "default/big-training", "--extender", extender)
    assert result.code == 0, result.err
    docs = (ROOT / "docs" / "kubectl-dra.md").read_text(encoding="utf-8")
    shown = docs.split("$ kubectl dra why default/big-training --extender http://localhost:8888\n", 1)[1]
    shown = shown.split("```", 1)[0]
    assert result.out.strip() == shown.strip()
