"""The README's curl examples, run against the demo cluster over real loopback HTTP.

Every fenced ``sh`` block of README.md that starts with ``# example: NAME`` is one request. The blocks
run in README order against one app serving ``deploy/examples/demo-cluster.yaml`` (filter ->
prioritize -> explain -> bind -> the debug views see the allocation), with ``localhost:8888``
replaced by the test server's address. The real ``curl`` runs when the machine has it; otherwise the
command is translated into the same aiohttp request (method, URL, headers, ``-d`` body). Each answer
must be HTTP 200, equal the ```` ```json ```` block printed right after the example (if there is one),
and pass the check below for its name. A last test runs the quick start's ``serve --demo`` as a
process and sends it README requests, so the two-command promise holds too.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from extender.backends.embedded import EmbeddedBackend
from extender.cli import main
from extender.core.answers import CANNOT_ALLOCATE, NO_CLASS_DEVICES, NOT_AVAILABLE
from extender.core.classic import EXCLUDED_BY_CLASS, UNSUITABLE
from extender.server.app import create_app
from extender.state.cache.ledger import InFlightLedger
from extender.state.service import SchedulingService

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CONFIGURATION = ROOT / "docs" / "configuration.md"
DEMO = ROOT / "deploy" / "examples" / "demo-cluster.yaml"
#: The address the README's commands use; the tests put their own server's address there.
README_ADDRESS = "localhost:8888"
CURL = shutil.which("curl")

_FENCE = re.compile(r"^```(?P<lang>[a-z]*)\n(?P<body>.*?)^```\n", re.M | re.S)
_MARKER = re.compile(r"^# example: (?P<name>[a-z-]+)$")


@dataclass(frozen=True)
class Example:
    name: str
    command: str  # the shell text after the marker line
    answer: Any | None  # the JSON answer the README prints right after the example, if any


@dataclass(frozen=True)
class Request:
    method: str
    url: str
    headers: dict[str, str]
    body: str | None
    argv: list[str]  # curl's arguments (without "curl")


@dataclass(frozen=True)
class Response:
    status: int
    text: str

    def json(self) -> Any:
        return json.loads(self.text)


def readme_examples(text: str | None = None) -> list[Example]:
    """The marked examples in README order, each with the ```json block that directly follows it."""
    text = README.read_text() if text is None else text
    blocks = list(_FENCE.finditer(text))
    examples = []
    for i, block in enumerate(blocks):
        first, _, rest = block["body"].partition("\n")
        marker = _MARKER.match(first)
        if block["lang"] != "sh" or marker is None:
            continue
        answer = None
        following = blocks[i + 1] if i + 1 < len(blocks) else None
        if following is not None and following["lang"] == "json" and not text[block.end() : following.start()].strip():
            answer = json.loads(following["body"])
        examples.append(Example(marker["name"], rest, answer))
    return examples


def parse_curl(command: str, address: str) -> Request:
    """The one curl command of an example, with the README's address replaced by ``address``.

    Only the options the README uses are understood (-s, -H, -d, -X); anything else (a pipe, a second
    command, another option) fails here, so the README stays within what this test can check.
    """
    argv = shlex.split(command.replace("\\\n", " "))
    assert argv and argv[0] == "curl", f"not a single curl command: {command!r}"
    argv = [arg.replace(README_ADDRESS, address) for arg in argv[1:]]
    method, url, headers, body = "", "", {}, None
    args = iter(argv)
    for arg in args:
        if arg == "-s":
            continue
        if arg == "-H":
            name, _, value = next(args).partition(":")
            headers[name.strip()] = value.strip()
        elif arg == "-d":
            body = next(args)
        elif arg == "-X":
            method = next(args)
        elif arg.startswith("-") or url:
            raise AssertionError(f"the README's curl commands may only use -s, -H, -d, -X and one URL: {arg!r}")
        else:
            url = arg
    assert url.startswith(address), f"example does not call {README_ADDRESS}: {command!r}"
    return Request(method or ("POST" if body is not None else "GET"), f"http://{url}", headers, body, argv)


async def send(request: Request, *, use_curl: bool = CURL is not None) -> Response:
    """Run the real curl (curl -d posts as written), or the same request through aiohttp."""
    if use_curl:
        assert CURL is not None
        process = await asyncio.create_subprocess_exec(
            CURL, *request.argv, "--write-out", "\n%{http_code}", stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        out, err = await process.communicate()
        assert process.returncode == 0, f"curl failed ({process.returncode}): {err.decode()}"
        text, _, code = out.decode().rpartition("\n")
        return Response(int(code), text)
    async with (
        aiohttp.ClientSession() as session,
        session.request(request.method, request.url, headers=request.headers, data=request.body) as answer,
    ):
        return Response(answer.status, await answer.text())


# --- what each example must show, beyond HTTP 200 and the printed answer ---------------------------


def _check_filter(body: Any) -> None:
    assert body["NodeNames"] == ["node-2", "node-3", "node-4"]
    assert body["FailedAndUnresolvableNodes"] == {"node-1": NO_CLASS_DEVICES}


def _check_filter_nodes(body: Any) -> None:
    assert body["NodeNames"] is None
    assert [item["metadata"]["name"] for item in body["Nodes"]["items"]] == ["node-2"]
    assert body["FailedNodes"] == {"node-1": CANNOT_ALLOCATE}


def _check_filter_error(body: Any) -> None:
    assert body["NodeNames"] == []
    assert "not found" in body["Error"]


def _check_prioritize(body: Any) -> None:
    assert [entry["Host"] for entry in body] == ["node-2", "node-3", "node-4"]
    assert all(0 <= entry["Score"] <= 10 for entry in body)
    best = max(body, key=lambda entry: entry["Score"])
    assert best["Host"] == "node-2"  # binpack: training-job already holds half of node-2's GPUs


def _check_explain(body: Any) -> None:
    nodes = {entry["node"]: entry for entry in body["nodes"]}
    assert nodes["node-1"]["outcome"] == "Failed"
    request = nodes["node-1"]["claims"][0]["requests"][0]
    assert (request["classMatches"], request["selectorMatches"]) == (8, 0)
    assert nodes["node-2"]["outcome"] == "Fits"


def _check_why(body: Any) -> None:
    assert body["pod"] == "default/aligned-pod"
    assert body["summary"].startswith(f"{body['fits']['count']}/4 nodes are available: 1 cannot allocate all claims")
    assert body["reasons"][0]["nodes"] == ["node-1"]


def _check_objects(body: Any) -> None:
    assert body["kind"] == "List"
    kinds = {item["kind"] for item in body["items"]}
    assert kinds == {"Node", "DeviceClass", "ResourceSlice", "ResourceClaimTemplate", "ResourceClaim", "Pod"}


def _check_bind(body: Any) -> None:
    assert body == {"Error": ""}


def _check_resourceclaims(body: Any) -> None:
    allocation = body["status"]["allocation"]
    picked = [(r["pool"], r["device"]) for r in allocation["devices"]["results"]]
    assert picked == [("node-2", "gpu-4"), ("node-2", "gpu-5")]
    assert allocation["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["node-2"]
    assert [ref["name"] for ref in body["status"]["reservedFor"]] == ["two-gpu-pod"]
    assert "resource.kubernetes.io/delete-protection" in body["metadata"]["finalizers"]


def _check_pods(body: Any) -> None:
    assert body["spec"]["nodeName"] == "node-2"


def _check_nodes(body: Any) -> None:
    holders = {device["device"]: device["claims"] for device in body["devices"] if device["pool"] == "node-2"}
    assert holders["gpu-0"] == ["default/training-job"]
    assert holders["gpu-4"] == holders["gpu-5"] == ["default/two-gpus"]
    assert holders["gpu-6"] == []


def _check_status(expected: str) -> Callable[[Any], None]:
    def check(body: Any) -> None:
        assert body["status"] == expected

    return check


def _check_metrics(text: str) -> None:
    assert 'dra_extender_binds_total{outcome="bound",reason=""} 1.0' in text
    assert "dra_extender_allocations_total 1.0" in text
    assert 'dra_extender_request_duration_seconds_count{verb="filter"} 3.0' in text
    # every family is documented in docs/configuration.md
    families = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}
    documented = CONFIGURATION.read_text()
    undocumented = sorted(f for f in families if not f.endswith("_created") and f"`{f}`" not in documented)
    assert not undocumented, f"metric families missing from docs/configuration.md: {undocumented}"


def _check_shared_filter(body: Any) -> None:
    assert body["NodeNames"] == ["node-3"]  # where inference-a's bind allocated the shared claim
    assert set(body["FailedAndUnresolvableNodes"].values()) == {NOT_AVAILABLE}


def _check_template_filter(body: Any) -> None:
    assert body["NodeNames"] == ["node-4"]  # the only node with partitions


def _check_template_pod(body: Any) -> None:
    [status] = body["status"]["resourceClaimStatuses"]
    assert status["name"] == "slice"
    assert status["resourceClaimName"].startswith("notebook-3-slice-")


def _check_extended_filter(body: Any) -> None:
    assert body["NodeNames"] == ["node-1", "node-4"]  # both have two free whole GPUs


def _check_extended_pod(body: Any) -> None:
    assert body["spec"]["nodeName"] == "node-1"
    status = body["status"]["extendedResourceClaimStatus"]
    assert status["resourceClaimName"].startswith("render-1-extended-resources-")
    assert status["requestMappings"] == [
        {"containerName": "render", "resourceName": "example.com/gpu", "requestName": "container-0-request-0"}
    ]


def _check_preempt(body: Any) -> None:
    # node-1: its in-tree victim suffices (free devices), passed through; node-2: a placeholder that fits, left out
    assert body == {
        "NodeNameToMetaVictims": {
            "node-1": {"Pods": [{"UID": "7f000000-0000-4000-8000-0000000000a1"}], "NumPDBViolations": 0}
        }
    }


FPGA_POD_UID = "7f000000-0000-4000-8000-00000000000d"


def _check_classic_filter(body: Any) -> None:
    assert body["NodeNames"] == ["node-3", "node-4"]  # the class's suitableNodes; no driver answer yet
    assert body["FailedAndUnresolvableNodes"] == dict.fromkeys(["node-1", "node-2"], EXCLUDED_BY_CLASS)


def _check_classic_context(body: Any) -> None:
    [owner] = body["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("Pod", FPGA_POD_UID, True)
    assert body["spec"] == {"potentialNodes": ["node-3", "node-4"]}  # published by the filter
    assert body["status"]["resourceClaims"] == [{"name": "fpga", "unsuitableNodes": ["node-3"]}]  # the driver


def _check_classic_filter_again(body: Any) -> None:
    assert body["NodeNames"] == ["node-4"]
    assert body["FailedAndUnresolvableNodes"]["node-3"] == UNSUITABLE


def _check_classic_claim(body: Any) -> None:
    allocation = body["status"]["allocation"]
    assert allocation["controller"] == "fpga.example.com"  # allocated by the driver, not the extender
    assert allocation["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["node-4"]
    assert body["status"]["reservedFor"] == [{"resource": "pods", "name": "fpga-pod", "uid": FPGA_POD_UID}]
    assert body["metadata"]["finalizers"] == ["fpga.example.com/deletion-protection"]


def _check_ui_page(text: str) -> None:
    assert text.lstrip().lower().startswith("<!doctype html")


def _check_ui_static(text: str) -> None:
    assert "ui/api/events" in text  # the page's script, which listens to the event stream


def _check_ui_summary(body: Any) -> None:
    assert body["totals"]["allocated"] == 6  # training-job's four GPUs and the two bound above
    assert body["counters"]["binds"] >= 1
    assert body["totals"]["nodes"] == 4


def _check_ui_nodes(body: Any) -> None:
    [node] = body["nodes"]
    devices = {device["name"]: device for device in node["devices"]}
    assert devices["gpu-4"]["state"] == devices["gpu-5"]["state"] == "allocated"
    assert devices["gpu-4"]["pods"] == ["default/two-gpu-pod"]
    assert devices["gpu-0"]["claims"] == ["default/training-job"]


def _check_ui_node(body: Any) -> None:
    devices = {device["name"]: device for device in body["devices"]}
    assert devices["gpu-4"]["claims"][0]["claim"] == "default/two-gpus"
    assert devices["gpu-4"]["capacity"] == {"memory": "80Gi"}
    assert {pool["status"] for pool in body["pools"]} == {"complete"}


def _check_ui_pools(body: Any) -> None:
    assert {pool["status"] for pool in body["pools"]} == {"complete"}
    assert len(body["pools"]) == 4


def _check_ui_pending(body: Any) -> None:
    pending = [pod["pod"] for pod in body["pods"]]
    assert "default/two-gpu-pod" not in pending and "default/aligned-pod" in pending


def _check_gang_filter(body: Any) -> None:
    [node] = body["NodeNames"]
    assert set(body["FailedNodes"].values()) == {f"gang default/workers: member planned on {node}"}


def _check_podgroups(body: Any) -> None:
    assert (body["minCount"], body["waiting"], body["need"]) == (2, ["worker-0", "worker-1"], 2)
    placements = body["pass"]["plan"]["placements"]
    assert sorted(p["pod"] for p in placements) == ["default/worker-0", "default/worker-1"]
    assert all(len(p["devices"]) == 4 for p in placements)


CHECKS: dict[str, Callable[[Any], None]] = {
    "filter": _check_filter,
    "filter-nodes": _check_filter_nodes,
    "filter-error": _check_filter_error,
    "prioritize": _check_prioritize,
    "explain": _check_explain,
    "why": _check_why,
    "objects": _check_objects,
    "bind": _check_bind,
    "resourceclaims": _check_resourceclaims,
    "pods": _check_pods,
    "nodes": _check_nodes,
    "healthz": _check_status("ok"),
    "readyz": _check_status("ready"),
    "shared-bind": _check_bind,
    "shared-filter": _check_shared_filter,
    "template-filter": _check_template_filter,
    "template-pod": _check_template_pod,
    "extended-filter": _check_extended_filter,
    "extended-bind": _check_bind,
    "extended-pod": _check_extended_pod,
    "preempt": _check_preempt,
    "classic-filter": _check_classic_filter,
    "classic-context": _check_classic_context,
    "classic-filter-again": _check_classic_filter_again,
    "classic-bind": _check_bind,
    "classic-claim": _check_classic_claim,
    "ui-summary": _check_ui_summary,
    "ui-nodes": _check_ui_nodes,
    "ui-node": _check_ui_node,
    "ui-pools": _check_ui_pools,
    "ui-pending": _check_ui_pending,
    "gang-filter": _check_gang_filter,
    "podgroups": _check_podgroups,
}
TEXT_CHECKS: dict[str, Callable[[str], None]] = {
    "metrics": _check_metrics,
    "ui-page": _check_ui_page,
    "ui-static": _check_ui_static,
}
#: Routes no one-shot ``curl -s`` can show with HTTP 200 (docs/ui.md shows them).
NOT_EXAMPLES = {
    "/ui": "a redirect to /ui/",
    "/ui/api/events": "a server-sent event stream, which does not end",
}


#: Seconds between two examples, as a person types them: longer than a hold lives (a filter that
#: leaves one node, and a prioritize, hold the pod's devices on its node for 2 s; docs/pipeline.md).
TYPING_SECONDS = 30.0


def _demo_app(clock: Callable[[], float] = time.monotonic) -> web.Application:
    service = SchedulingService(backend=EmbeddedBackend.from_paths(DEMO), ledger=InFlightLedger(clock=clock))
    return create_app(service)


# --- tests ---------------------------------------------------------------------------------------


def test_readme_marks_one_example_per_check() -> None:
    names = [example.name for example in readme_examples()]
    assert len(names) == len(set(names)), f"duplicate example names: {names}"
    assert set(names) == set(CHECKS) | set(TEXT_CHECKS)


def test_examples_cover_every_route() -> None:
    app = _demo_app()
    address = "127.0.0.1:1"
    requested = {(r.method, r.url.removeprefix(f"http://{address}")) for r in _requests(address)}
    for route in app.router.routes():
        if route.method == "HEAD":
            continue  # aiohttp adds HEAD beside every GET
        info = route.resource.get_info() if route.resource is not None else {}
        # plain routes have a "path", variable ones (/debug/pods/{namespace}/{name}) a regex "pattern"
        if info.get("path") in NOT_EXAMPLES:
            continue
        pattern = info.get("pattern") or re.compile(re.escape(info.get("path", "")))
        covered = any(
            method == route.method and pattern.fullmatch(path.partition("?")[0]) for method, path in requested
        )  # a route is a path: an example's query string does not matter here
        assert covered, f"no README example for {route.method} {info}"


def test_every_serve_flag_is_documented(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    flags = set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", capsys.readouterr().out)) - {"--help"}
    assert "--listen" in flags
    documented = CONFIGURATION.read_text()
    assert not sorted(flag for flag in flags if f"`{flag}" not in documented)
    for flag in flags:
        variable = "DRA_EXTENDER_" + flag[2:].replace("-", "_").upper()
        assert f"`{variable}`" in documented, variable


def test_parse_curl_reads_what_the_readme_uses() -> None:
    command = "curl -s localhost:8888/filter -H 'Content-Type: application/json' -d '{\n  \"Pod\": {}}'\n"
    request = parse_curl(command, "127.0.0.1:9")
    assert (request.method, request.url) == ("POST", "http://127.0.0.1:9/filter")
    assert request.headers == {"Content-Type": "application/json"}
    assert request.body == '{\n  "Pod": {}}'
    with pytest.raises(AssertionError, match="only use"):
        parse_curl("curl -s localhost:8888/metrics | grep binds", "127.0.0.1:9")


def _requests(address: str) -> Iterator[Request]:
    for example in readme_examples():
        yield parse_curl(example.command, address)


@pytest.mark.parametrize(
    "use_curl",
    [pytest.param(True, marks=pytest.mark.skipif(CURL is None, reason="no curl on this machine")), False],
    ids=["curl", "aiohttp"],
)
async def test_readme_examples_against_the_demo(aiohttp_server: Any, use_curl: bool) -> None:
    typed = [time.monotonic()]
    server = await aiohttp_server(_demo_app(lambda: typed[0]))
    address = f"127.0.0.1:{server.port}"
    for example in readme_examples():
        typed[0] += TYPING_SECONDS
        response = await send(parse_curl(example.command, address), use_curl=use_curl)
        assert response.status == 200, f"{example.name}: HTTP {response.status}: {response.text}"
        if example.name in TEXT_CHECKS:
            TEXT_CHECKS[example.name](response.text)
            continue
        body = response.json()
        if example.answer is not None:
            assert body == example.answer, f"{example.name}: the answer differs from the README's"
        CHECKS[example.name](body)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def test_quick_start_serve_demo_answers_the_examples(tmp_path: Path) -> None:
    """``dra-extender serve --demo`` as the quick start runs it (here via ``python -m extender``)."""
    log = (tmp_path / "serve.log").open("wb")
    port = _free_port()
    address = f"127.0.0.1:{port}"
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "extender",
        "serve",
        "--demo",
        "--listen",
        address,
        "--log-format",
        "json",
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        examples = {example.name: example for example in readme_examples()}
        readyz = parse_curl(examples["readyz"].command, address)
        deadline = time.monotonic() + 120  # a bound against a hang: the loop ends as soon as it answers
        while time.monotonic() < deadline:
            if process.returncode is not None:
                break
            try:
                if (await send(readyz)).status == 200:
                    break
            except (AssertionError, aiohttp.ClientError):
                pass
            await asyncio.sleep(0.1)
        assert process.returncode is None, f"serve exited: {(tmp_path / 'serve.log').read_text()}"
        for name in ("healthz", "filter"):
            response = await send(parse_curl(examples[name].command, address))
            assert response.status == 200
            assert response.json() == examples[name].answer
    finally:
        if process.returncode is None:
            process.terminate()
        await process.wait()
        log.close()
