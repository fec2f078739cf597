"""The allocator case table: every case of every ``tests/core/cases/*.yaml`` file, one test each.

Covers what the allocator decides (devices, node selector, config, unfit / unresolvable / fatal
errors) for plain Kubernetes manifests in any served resource.k8s.io version, run through the
production converter. Each case runs with a cold and a warm SelectorCache that must agree, and the
raw manifests must come out unchanged (``caserunner.check_case``). Also checks the table itself:
well-formed files, unique case names, and its size. Wire mapping over HTTP is left to
``tests/server``; randomized invariants to ``test_allocator_properties.py``.

A case marked ``xfail: "<reason>"`` documents a known implementation bug; it runs as a strict
xfail, so fixing the bug turns it into a failure until the marker is removed.
"""

from __future__ import annotations

import pytest

from tests.core import caserunner

CASES, PROBLEMS = caserunner.load_case_files()
MIN_CASES = 100


def _params() -> list[object]:
    params: list[object] = []
    for case in CASES:
        marks = [pytest.mark.xfail(reason=case.xfail, strict=True)] if case.xfail else []
        params.append(pytest.param(case, id=case.name, marks=marks))
    return params


@pytest.mark.parametrize("case", _params())
def test_case(case: caserunner.Case) -> None:
    try:
        caserunner.check_case(case)
    except caserunner.UnsupportedCase as exc:
        pytest.skip(f"{case.name}: {exc}")


def test_case_files_are_well_formed() -> None:
    assert PROBLEMS == [], "malformed cases:\n" + "\n".join(PROBLEMS)


def test_case_names_are_unique() -> None:
    duplicates = caserunner.duplicate_names(CASES)
    assert duplicates == {}, f"case names used more than once (name: files): {duplicates}"


def test_table_holds_enough_cases() -> None:
    assert len(CASES) >= MIN_CASES, f"the case table holds {len(CASES)} cases, want at least {MIN_CASES}"


# --- the runner's own comparisons (so a lenient matcher cannot hide allocator bugs) -----------


def test_device_entries_match_only_on_given_keys() -> None:
    got = {"request": "req-0", "driver": "driver-a", "pool": "pool/x", "device": "device-1", "adminAccess": True}
    assert caserunner.device_entry_matches({"request": "req-0", "device": "driver-a/pool/x/device-1"}, got)
    assert not caserunner.device_entry_matches(
        {"request": "req-0", "device": "driver-a/pool/x/device-1", "adminAccess": False}, got
    )
    assert not caserunner.device_entry_matches({"request": "req-1", "device": "driver-a/pool/x/device-1"}, got)
    assert not caserunner.device_entry_matches(
        {"request": "req-0", "device": "driver-a/pool/x/device-1", "shareID": True}, got
    )


def test_node_selectors_compare_as_sets() -> None:
    one = {
        "nodeSelectorTerms": [
            {
                "matchExpressions": [
                    {"key": "a", "operator": "In", "values": ["x", "y"]},
                    {"key": "b", "operator": "Exists"},
                ]
            }
        ]
    }
    two = {
        "nodeSelectorTerms": [
            {
                "matchExpressions": [
                    {"key": "b", "operator": "Exists", "values": []},
                    {"key": "a", "operator": "In", "values": ["y", "x"]},
                ]
            }
        ]
    }
    other = {"nodeSelectorTerms": [{"matchFields": [{"key": "a", "operator": "In", "values": ["x", "y"]}]}]}
    assert caserunner.normalize_node_selector(one) == caserunner.normalize_node_selector(two)
    assert caserunner.normalize_node_selector(one) != caserunner.normalize_node_selector(other)


def test_malformed_case_is_reported() -> None:
    raw = {"name": "Bad_Name", "why": "x", "allocate": ["claim-0"], "expect": {"unfit": True}}
    with pytest.raises(caserunner.CaseFormatError, match="kebab-case"):
        caserunner.parse_case(raw, source="inline")
    raw = {"name": "two-outcomes", "why": "x", "allocate": [], "expect": {"unfit": True, "unresolvable": True}}
    with pytest.raises(caserunner.CaseFormatError, match="exactly one"):
        caserunner.parse_case(raw, source="inline")
