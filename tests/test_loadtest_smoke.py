"""Smoke runs of the load test and the service benchmark, so the scripts never rot.

- A small generated cluster is served by ``python -m extender serve --cluster`` on a free loopback
  port; locust runs ``loadtest/locustfile.py`` headless against it (both user classes) until ten
  pods are scheduled and ten read filters answered (``--stop-after``: the run lasts as long as that
  work takes on this machine, ``-t`` only bounds it); its final stats (``--json-file``) must show
  filter, prioritize and bind requests, scheduled pods, and no failed request;
  ``loadtest/summarize.py`` must read them and the stats CSV.
- ``python -m bench.service --quick`` must print its table.

Everything runs in subprocesses: locust monkeypatches the standard library with gevent, so it is
never imported here. Timings are not checked.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import cluster_gen

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_ready(url: str, process: subprocess.Popen[bytes], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, "the server exited"
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"server at {url} not ready after {timeout} s")


@pytest.fixture
def served_cluster(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    path = tmp_path / "cluster.json"
    spec = cluster_gen.ClusterSpec(nodes=20, devices=4, nics=1, pods=400, unschedulable=0.05, seed=7)
    cluster_gen.write(cluster_gen.generate(spec), path)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "extender", "serve", "--cluster", str(path), "--listen", f"127.0.0.1:{port}"]
    log = (tmp_path / "server.log").open("wb")
    process = subprocess.Popen(
        [*command, "--log-format", "json", "--log-level", "warning"], cwd=ROOT, stdout=log, stderr=log
    )
    try:
        _wait_ready(url, process)
        yield url, path
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


def test_locust_headless_run_schedules_pods_without_failures(served_cluster: tuple[str, Path], tmp_path: Path) -> None:
    url, cluster = served_cluster
    prefix = tmp_path / "out"
    command = [
        sys.executable, "-m", "locust", "-f", str(ROOT / "loadtest" / "locustfile.py"),
        "--headless", "-u", "4", "-r", "4", "-t", "300s", "--stop-after", "10", "--host", url, "--csv", str(prefix),
        "--cluster-file", str(cluster), "--only-summary", "--loglevel", "WARNING", "--json-file", str(tmp_path / "out"),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # the run ends once ten pods are scheduled and ten read filters answered (-t only bounds it)
    run = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    document = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))
    final = {(entry["method"], entry["name"]): entry for entry in document}
    for key in (("POST", "filter"), ("POST", "prioritize"), ("POST", "bind")):
        assert final[key]["num_requests"] > 0, key
    assert final[("POST", "filter (read)")]["num_requests"] >= 10
    assert final[("POD", "scheduled")]["num_requests"] >= 10
    assert sum(entry["num_failures"] for entry in document) == 0, run.stderr[-3000:]

    def summarize(source: Path) -> str:
        done = subprocess.run(
            [sys.executable, str(ROOT / "loadtest" / "summarize.py"), str(source)], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    final_summary = summarize(tmp_path / "out.json")
    assert "| POST | filter |" in final_summary and "| POD | scheduled |" in final_summary
    assert "failures: 0" in final_summary
    # the CSV is as of locust's last periodic write (once a second): readable, whatever it holds
    assert "failures: 0" in summarize(prefix)


def test_service_bench_quick_prints_a_table() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "bench.service", "--quick", "--sizes", "20", "--cli-timeout", "20"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert any(line.startswith("| nodes x devices | filter p50 / p99 ms") for line in lines), run.stdout
    assert any(line.startswith("| 20 x 4 |") for line in lines), run.stdout
