"""``dra-extender serve``: flags, their environment variables, clear errors for bad settings, and a
real run of ``python -m extender serve --demo`` answering over HTTP with JSON logs on stdout.
The ``allocate`` command is covered by ``tests/test_cli.py``."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from aiohttp import web

from extender import cli
from extender.server.keys import SERVICE, SETTINGS

CLUSTER = Path(__file__).parent / "fixtures" / "small-cluster.yaml"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def clean_env_and_logging(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith(cli.ENV_PREFIX):
            monkeypatch.delenv(name)
    yield
    structlog.reset_defaults()  # serve configured logging globally; other tests capture logs


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[web.Application]:
    """Replace the blocking ``run`` with one that records the app it was given."""
    apps: list[web.Application] = []
    monkeypatch.setattr("extender.server.app.run", apps.append)
    return apps


def test_flags(served: list[web.Application]) -> None:
    argv = ["serve", "--cluster", str(CLUSTER), "--listen", "0.0.0.0:9443", "--path-prefix", "/v1", "--scoring",
            "spread=2", "--max-body-bytes", "1000", "--log-format", "json", "--log-level", "debug"]  # fmt: skip
    assert cli.main(argv) == 0
    settings = served[0][SETTINGS]
    assert (settings.host, settings.port, settings.path_prefix, settings.max_body_bytes) == (
        "0.0.0.0",
        9443,
        "/v1",
        1000,
    )
    service = served[0][SERVICE]
    assert str(service.scoring) == "spread=2"
    assert "default/two-gpus" in service.store.claims


def test_filter_picks_node_flag_and_variable(served: list[web.Application], monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli.main(["serve", "--cluster", str(CLUSTER), "--filter-picks-node"]) == 0
    monkeypatch.setenv("DRA_EXTENDER_FILTER_PICKS_NODE", "1")
    assert cli.main(["serve", "--cluster", str(CLUSTER)]) == 0
    for off in ("0", "false", ""):
        monkeypatch.setenv("DRA_EXTENDER_FILTER_PICKS_NODE", off)
        assert cli.main(["serve", "--cluster", str(CLUSTER)]) == 0
    assert [app[SERVICE].filter_picks_node for app in served] == [True, True, False, False, False]


def test_event_loop_flag_and_variable(served: list[web.Application], monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli.main(["serve", "--cluster", str(CLUSTER), "--event-loop", "asyncio"]) == 0
    monkeypatch.setenv("DRA_EXTENDER_EVENT_LOOP", "uvloop")
    assert cli.main(["serve", "--cluster", str(CLUSTER)]) == 0
    assert [app[SETTINGS].event_loop for app in served] == ["asyncio", "uvloop"]


def test_defaults(served: list[web.Application]) -> None:
    assert cli.main(["serve", "--cluster", str(CLUSTER)]) == 0
    settings, service = served[0][SETTINGS], served[0][SERVICE]
    assert (settings.host, settings.port, settings.path_prefix) == ("127.0.0.1", 8888, "/")
    assert settings.max_body_bytes == 64 * 1024 * 1024
    assert settings.tls_cert_file is None
    assert settings.event_loop == "auto"
    assert str(service.scoring) == "binpack=1,prioritized=1"
    assert service.filter_picks_node is False


def test_environment_variables(served: list[web.Application], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRA_EXTENDER_CLUSTER", f"{CLUSTER}{os.pathsep}")  # path list; empty items skipped
    monkeypatch.setenv("DRA_EXTENDER_LISTEN", "127.0.0.2:7000")
    monkeypatch.setenv("DRA_EXTENDER_PATH_PREFIX", "/ext")
    monkeypatch.setenv("DRA_EXTENDER_SCORING", "spread")
    monkeypatch.setenv("DRA_EXTENDER_MAX_BODY_BYTES", "4096")
    monkeypatch.setenv("DRA_EXTENDER_LOG_FORMAT", "console")
    monkeypatch.setenv("DRA_EXTENDER_LOG_LEVEL", "warning")
    assert cli.main(["serve"]) == 0
    settings = served[0][SETTINGS]
    assert (settings.host, settings.port, settings.path_prefix, settings.max_body_bytes) == (
        "127.0.0.2",
        7000,
        "/ext",
        4096,
    )
    assert str(served[0][SERVICE].scoring) == "spread=1"


def test_flags_win_over_environment(served: list[web.Application], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRA_EXTENDER_LISTEN", "127.0.0.2:7000")
    monkeypatch.setenv("DRA_EXTENDER_CLUSTER", "/does/not/exist.yaml")
    assert cli.main(["serve", "--cluster", str(CLUSTER), "--listen", "127.0.0.3:7001"]) == 0
    assert served[0][SETTINGS].port == 7001


def test_demo_flag_and_variable(served: list[web.Application], monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli.main(["serve", "--demo"]) == 0
    monkeypatch.setenv("DRA_EXTENDER_DEMO", "true")
    assert cli.main(["serve"]) == 0
    assert len(served) == 2
    assert len(served[1][SERVICE].store.slices) > 0


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["serve"], {"HOME": "/nonexistent"}, "serve needs a cluster: --cluster PATH (repeatable), --demo"),
        (["serve", "--demo", "--kubeconfig", "kubeconfig.yaml"], {}, "one cluster source"),
        (["serve", "--cluster", str(CLUSTER), "--kubeconfig", "kubeconfig.yaml"], {}, "one cluster source"),
        (["serve", "--demo", "--cluster", str(CLUSTER)], {}, "either --cluster or --demo, not both"),
        (["serve", "--cluster", "/does/not/exist.yaml"], {}, "error:"),
        (["serve", "--cluster", str(CLUSTER), "--tls-cert-file", "c.pem"], {}, "both a certificate file and a key"),
        (["serve", "--cluster", str(CLUSTER), "--tls-cert-file", "c.pem", "--tls-key-file", "k.pem"], {}, "TLS files"),
        (["serve", "--cluster", str(CLUSTER)], {"DRA_EXTENDER_LOG_FORMAT": "xml"}, "log format must be one of"),
        (["serve", "--cluster", str(CLUSTER)], {"DRA_EXTENDER_LOG_LEVEL": "loud"}, "log level must be one of"),
        (["serve", "--cluster", str(CLUSTER)], {"DRA_EXTENDER_EVENT_LOOP": "trio"}, "event loop must be one of"),
    ],
)
def test_clear_errors(
    served: list[web.Application],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    env: dict[str, str],
    message: str,
) -> None:
    for name in ("KUBERNETES_SERVICE_HOST", "KUBECONFIG"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err
    assert served == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--scoring", "fastest"], "unknown scoring policy 'fastest'"),
        (["--listen", "8888"], "listen address '8888' is not HOST:PORT"),
        (["--max-body-bytes", "-1"], "must be a positive integer"),
        (["--log-format", "xml"], "invalid choice"),
        (["--event-loop", "trio"], "invalid choice"),
        (["--requeue-rate", "-1"], "must not be negative"),
        (["--no-such-flag"], "unrecognized arguments"),
    ],
)
def test_usage_errors(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["serve", "--cluster", str(CLUSTER), *argv])
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_bad_environment_value_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DRA_EXTENDER_MAX_BODY_BYTES", "lots")
    with pytest.raises(SystemExit):
        cli.main(["serve", "--demo"])
    assert "--max-body-bytes" in capsys.readouterr().err


def test_uvloop_asked_for_but_missing_is_explained(
    served: list[web.Application], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop now raises ImportError
    assert cli.main(["serve", "--cluster", str(CLUSTER), "--event-loop", "uvloop"]) == 2
    assert "event loop uvloop is not available" in capsys.readouterr().err
    assert served == []
    assert cli.main(["serve", "--cluster", str(CLUSTER)]) == 0  # auto: asyncio's loop instead


def test_missing_demo_file_is_explained(
    served: list[web.Application], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "DEMO_CLUSTER", Path("/nowhere/demo-cluster.yaml"))
    assert cli.main(["serve", "--demo"]) == 2
    err = capsys.readouterr().err
    assert "/nowhere/demo-cluster.yaml" in err and "--cluster PATH" in err


# --- a real process -------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _request(url: str, body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_serve_demo_in_a_real_process() -> None:
    port = _free_port()
    env = {**os.environ, "DRA_EXTENDER_LOG_FORMAT": "json", "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "extender", "serve", "--demo", "--listen", f"127.0.0.1:{port}", "--path-prefix", "v1"]
    argv += ["--log-level", "debug"]  # a filter that passes nodes is logged at debug
    process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        base = f"http://127.0.0.1:{port}/v1"
        deadline = time.monotonic() + 120  # a bound against a hang: the loop ends as soon as it answers
        status = 0
        while True:
            try:
                status, _ = _request(f"{base}/readyz")
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        assert status == 200
        uid = "7f000000-0000-4000-8000-000000000002"
        pod = {"metadata": {"name": "two-gpu-pod", "namespace": "default", "uid": uid},
               "spec": {"resourceClaims": [{"name": "gpus", "resourceClaimName": "two-gpus"}]}}  # fmt: skip
        status, answer = _request(f"{base}/filter", {"Pod": pod, "NodeNames": ["node-1", "node-2", "node-3"]})
        assert status == 200
        assert isinstance(answer["NodeNames"], list) and answer["Error"] == ""
        status, answer = _request(f"{base}/filter", {"NodeNames": []})
        assert (status, answer) == (400, {"error": "Pod is required"})
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=20)
    assert process.returncode == 0, err.decode()
    events = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
    names = [e["event"] for e in events]
    assert "server.listening" in names and "filter.decided" in names and "backend.stopped" in names
    listening = next(e for e in events if e["event"] == "server.listening")
    expected_loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    assert listening["event_loop"] == expected_loop
    decided = next(e for e in events if e["event"] == "filter.decided")
    assert decided["pod"] == "default/two-gpu-pod" and decided["level"] == "debug" and "timestamp" in decided
    assert set(decided) == {
        *("event", "level", "timestamp", "request_id", "verb", "pod"),
        *("nodes", "passed", "failed", "unresolvable", "error", "duration_ms"),
    }
    assert decided["verb"] == "filter" and re.fullmatch(r"[0-9a-f]{32}", decided["request_id"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?Z", decided["timestamp"])
    refused = next(e for e in events if e["event"] == "request.refused")
    assert set(refused) == {"event", "level", "timestamp", "request_id", "verb", "method", "path", "code", "error"}
    assert (refused["verb"], refused["code"]) == ("filter", 400) and refused["request_id"] != decided["request_id"]


def test_without_manifests_the_kubernetes_backend_is_used(
    served: list[web.Application], monkeypatch: pytest.MonkeyPatch
) -> None:
    from extender.backends.kube import KubeBackend

    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    assert cli.main(["serve"]) == 0  # in a pod: the in-cluster service account, loaded at start
    monkeypatch.setenv("DRA_EXTENDER_KUBECONFIG", "/etc/kube/config")
    assert cli.main(["serve", "--lease-name", "dra-extender-scheduler", "--requeue-rate", "0"]) == 0
    first, second = (app[SERVICE] for app in served)
    assert isinstance(first.backend, KubeBackend) and isinstance(second.backend, KubeBackend)
    assert first.rejected is first.backend.rejected is not None  # fast requeue on by default
    assert second.backend.rejected is None and second.backend.settings.lease is not None
    assert second.backend.settings.lease.name == "dra-extender-scheduler"
