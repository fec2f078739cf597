"""The soak run's short variant (``python -m bench.soak --quick``, docs/reliability.md): 500 pods
through the kube-scheduler model against the extender process while the fake API server injects
409s, 500s, dropped watches, 410 relists and restarts, and bound pods go away (their claims freed
by the resourceclaim controller's model), one every 10 pods bound (paced by progress, not seconds:
a fast machine meets every kind of fault too, a slow one no more per pod). The scan afterwards must
be clean: every pod bound with its claims, no device twice, no reservation for a missing pod, no
allocation for nobody, no ledger entry left. Counts, never timings."""

from __future__ import annotations

import pytest

from bench import soak


def test_the_quick_soak_leaves_a_clean_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    assert soak.main(["--quick"]) == 0
    rows = [
        (line.split("|")[1].strip(), line.split("|")[2].strip())
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("| ") and line.count("|") == 3
    ]
    table = dict(rows)
    assert next(value for label, value in rows if label == "pods bound") == "500 of 500"  # the model's
    assert int(table["pods bound"]) + int(table["pods deleted during the run"]) == 500  # the scan's
    for fault in soak.FAULTS:
        assert int(table[f"faults: {fault}"]) >= 1  # every kind of fault was injected
    for row in (
        "pods not bound",
        "devices allocated twice",
        "pods bound without their claims",
        "reservations for pods that do not exist",
        "claims allocated, reserved for nobody",
        "ledger entries left",
    ):
        assert table[row] == "0", row
