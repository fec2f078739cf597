"""Paging through a larger generated cluster (bench/cluster_gen.py, 120 nodes), served under a path
prefix: the page's URLs are all relative, so it works wherever the extender is mounted."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench import cluster_gen
from tests.ui.conftest import DASH, TIMEOUT_MS, Server, change_and_wait, open_map, serve

#: Without Playwright the module is skipped with this reason (pytest -rs prints it), never passed.
_playwright = pytest.importorskip(
    "playwright.sync_api", reason="browser tests need playwright: pip install -e '.[dev]'"
)
#: Playwright's ``expect`` gives up after 5 s whatever the page's default timeout, which a loaded
#: machine can take; this module's own instance waits up to ``TIMEOUT_MS``, a bound against a hang
#: only (the global ``expect`` is left as it is).
expect = type(_playwright.expect)()
expect.set_options(timeout=TIMEOUT_MS)

NODES = 120


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    path = Path(tmp_path_factory.mktemp("ui-paging")) / "cluster.json"
    cluster_gen.write(cluster_gen.generate(cluster_gen.ClusterSpec(nodes=NODES, devices=4, partitionable=0.1)), path)
    with serve(["--cluster", str(path)], prefix="/ext/") as server:
        yield server


def shown_nodes(page: Any) -> list[str]:
    names: list[str] = page.eval_on_selector_all("#nodes .node", "rows => rows.map(r => r.dataset.node)")
    return names


def test_pages_of_nodes_under_a_path_prefix(page: Any, cluster: Server) -> None:
    open_map(page, f"{cluster.ui}?limit=25")
    info = page.locator("#page-info")
    expect(info).to_have_text(f"nodes 1{DASH}25 of {NODES}")
    names = [n["name"] for n in cluster.get("ui/api/nodes?limit=500")["nodes"]]
    assert len(names) == NODES
    assert shown_nodes(page) == names[:25]
    expect(page.locator("#page-prev")).to_be_disabled()

    change_and_wait(page, lambda: page.click("#page-next"))
    expect(info).to_have_text(f"nodes 26{DASH}50 of {NODES}")
    assert shown_nodes(page) == names[25:50]
    assert "offset=25" in page.url

    change_and_wait(page, lambda: page.click("#page-last"))
    expect(info).to_have_text(f"nodes 101{DASH}{NODES} of {NODES}")
    assert shown_nodes(page) == names[100:]
    expect(page.locator("#page-next")).to_be_disabled()

    # a search goes back to the first page of what matches
    change_and_wait(page, lambda: page.fill("#filter-q", "node-0011"))
    expect(info).to_have_text(f"nodes 1{DASH}10 of 10")
    assert shown_nodes(page) == [n for n in names if "node-0011" in n]

    change_and_wait(page, lambda: page.fill("#filter-q", ""))
    change_and_wait(page, lambda: page.select_option("#page-size", "100"))
    expect(info).to_have_text(f"nodes 1{DASH}100 of {NODES}")
    expected = sum(len(n["devices"]) for n in cluster.get("ui/api/nodes?limit=100")["nodes"])
    expect(page.locator("#nodes .cell[data-device-id]")).to_have_count(expected)
