"""Runner for the allocator case table in ``tests/core/cases/*.yaml``.

Each YAML file is a list of cases (format: ``notes/cases-format.md``, summarised in DESIGN.md). This
module holds everything except the pytest wiring:

- loading and checking the files (``load_case_files``), so a malformed case is reported by name
  instead of breaking collection;
- running one case (``run_case``): decode the raw manifests with the production converter, build the
  slice snapshot and the allocated state, call ``Allocator.allocate`` once, and reduce what happened
  to a plain ``Outcome`` (results encoded as resource.k8s.io/v1 JSON, or unfit / unresolvable /
  error);
- checking a case end to end (``check_case``): run it with a cold and then a warm ``SelectorCache``,
  require both runs to agree, require the raw objects to be unchanged, and compare the outcome with
  ``expect`` with assertion messages that show expected and actual side by side.

The production modules are imported lazily, so that the case files can be loaded (and their format
checked) even while parts of the core are still missing.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

CASES_DIR = Path(__file__).parent / "cases"

DEFAULT_NODE: dict[str, Any] = {"name": "node-1", "labels": {"region": "region-1"}}
DEFAULT_NAMESPACE = "default"
ENCODE_VERSION = "resource.k8s.io/v1"

_CASE_KEYS = {
    "name",
    "why",
    "features",
    "node",
    "objects",
    "allocated",
    "allocate",
    "preallocated",
    "expect",
    "work",
    "xfail",
}
_EXPECT_KINDS = ("results", "unfit", "unresolvable", "error")
_RESULT_KEYS = {"devices", "nodeSelector", "config"}
_DEVICE_KEYS = {
    "request",
    "device",
    "adminAccess",
    "shareID",
    "consumedCapacity",
    "tolerations",
    "bindingConditions",
    "bindingFailureConditions",
}
_NAME_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
_UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
#: NodeUnresolvable's one upstream text (docs/semantics.md §12c, "Per-node").
UNRESOLVABLE_TEXT = "invalid resource pools were encountered"


class CaseFormatError(ValueError):
    """A case file or case does not follow the table format."""


@dataclass(frozen=True)
class Case:
    """One validated case, with its raw YAML data kept as loaded."""

    name: str
    source: str
    why: str
    features: Mapping[str, bool]
    node: Mapping[str, Any]
    objects: Sequence[Mapping[str, Any]]
    allocated: Sequence[str]
    allocate: Sequence[str]
    expect: Mapping[str, Any]
    work: Mapping[str, Any] | None
    xfail: str | None
    preallocated: Sequence[str] = ()

    @property
    def claim_keys(self) -> list[str]:
        """``allocate`` entries as ``ns/name`` keys, in order."""
        return [claim_key(ref) for ref in self.allocate]


@dataclass(frozen=True)
class Outcome:
    """What one ``allocate()`` call did, reduced to plain data.

    ``kind`` is one of ``results``, ``unfit``, ``unresolvable``, ``error``. ``results`` maps each
    ``allocate`` entry (as written in the case) to its v1-encoded AllocationResult.
    """

    kind: str
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    error_class: str | None = None
    error_classes: tuple[str, ...] = ()
    error_text: str | None = None
    search_steps: int | None = None

    def describe(self) -> str:
        if self.kind == "results":
            return "results:\n" + _dump(self.results)
        if self.kind == "error":
            return f"error {self.error_class}: {self.error_text}"
        if self.kind == "unresolvable":
            return f"unresolvable: {self.error_text}"
        return self.kind


class UnsupportedCase(Exception):
    """The case asks for something this allocator cannot run (the test is skipped)."""


# --- loading ----------------------------------------------------------------------------------


def claim_key(ref: str) -> str:
    """``claim-0`` -> ``default/claim-0``; ``ns/claim`` stays as it is."""
    return ref if "/" in ref else f"{DEFAULT_NAMESPACE}/{ref}"


def parse_device_id(text: str) -> tuple[str, str, str]:
    """``driver/pool/device``; a pool name may itself contain slashes."""
    parts = text.split("/")
    if len(parts) < 3 or not all(parts):
        raise CaseFormatError(f"device ID {text!r} is not driver/pool/device")
    return parts[0], "/".join(parts[1:-1]), parts[-1]


def load_case_files(directory: Path = CASES_DIR) -> tuple[list[Case], list[str]]:
    """All cases of all ``*.yaml`` files in name order, plus one problem text per malformed case/file."""
    cases: list[Case] = []
    problems: list[str] = []
    for path in sorted(directory.glob("*.yaml")):
        try:
            raw_cases = yaml.safe_load(path.read_text())
        except yaml.YAMLError as exc:
            problems.append(f"{path.name}: not valid YAML: {exc}")
            continue
        if raw_cases is None:
            continue
        if not isinstance(raw_cases, list):
            problems.append(f"{path.name}: must hold a YAML list of cases")
            continue
        for index, raw in enumerate(raw_cases):
            label = raw.get("name", f"#{index}") if isinstance(raw, dict) else f"#{index}"
            try:
                cases.append(parse_case(raw, source=path.name))
            except CaseFormatError as exc:
                problems.append(f"{path.name}: case {label}: {exc}")
    return cases, problems


def duplicate_names(cases: Iterable[Case]) -> dict[str, list[str]]:
    """Case names used more than once, with the files that use them."""
    seen: dict[str, list[str]] = {}
    for case in cases:
        seen.setdefault(case.name, []).append(case.source)
    return {name: files for name, files in seen.items() if len(files) > 1}


def parse_case(raw: Any, *, source: str) -> Case:
    """Check one raw case against the format and wrap it; raises CaseFormatError."""
    if not isinstance(raw, dict):
        raise CaseFormatError("a case must be a mapping")
    unknown = set(raw) - _CASE_KEYS
    if unknown:
        raise CaseFormatError(f"unknown keys {sorted(unknown)}")
    name = raw.get("name")
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise CaseFormatError(f"name {name!r} must be kebab-case")
    why = raw.get("why")
    if not isinstance(why, str) or not why.strip():
        raise CaseFormatError("'why' (one line: which upstream behaviour, spec section) is required")
    features = raw.get("features") or {}
    if not isinstance(features, dict) or not all(isinstance(v, bool) for v in features.values()):
        raise CaseFormatError("features must map feature names to true/false")
    node = raw.get("node") or DEFAULT_NODE
    if not isinstance(node, dict) or not isinstance(node.get("name"), str):
        raise CaseFormatError("node must be {name, labels}")
    objects = raw.get("objects") or []
    if not isinstance(objects, list) or not all(isinstance(o, dict) and "kind" in o for o in objects):
        raise CaseFormatError("objects must be a list of Kubernetes manifests (with kind)")
    allocated = raw.get("allocated") or []
    for text in allocated:
        parse_device_id(text)
    allocate = raw.get("allocate") or []
    if not isinstance(allocate, list) or not all(isinstance(a, str) for a in allocate):
        raise CaseFormatError("allocate must be a list of claim names")
    preallocated = raw.get("preallocated") or []
    if not isinstance(preallocated, list) or not all(isinstance(a, str) for a in preallocated):
        raise CaseFormatError("preallocated must be a list of claim names (claims with status.allocation)")
    expect = raw.get("expect")
    _check_expect(expect, allocate)
    assert isinstance(expect, dict)  # checked above; tells the type checker
    work = raw.get("work")
    if work is not None and (not isinstance(work, dict) or set(work) - {"search_steps"}):
        raise CaseFormatError("work may only hold search_steps")
    xfail = raw.get("xfail")
    if xfail is not None and (not isinstance(xfail, str) or not xfail.strip()):
        raise CaseFormatError("xfail must be a non-empty reason")
    return Case(
        name=name,
        source=source,
        why=why,
        features=features,
        node=node,
        objects=objects,
        allocated=allocated,
        allocate=allocate,
        expect=expect,
        work=work,
        xfail=xfail,
        preallocated=tuple(preallocated),
    )


def _check_expect(expect: Any, allocate: Sequence[str]) -> None:
    if not isinstance(expect, dict):
        raise CaseFormatError("expect is required")
    kinds = [k for k in _EXPECT_KINDS if k in expect]
    if len(kinds) != 1 or set(expect) - set(_EXPECT_KINDS):
        raise CaseFormatError(f"expect must hold exactly one of {list(_EXPECT_KINDS)}, got {sorted(expect)}")
    kind = kinds[0]
    if kind in ("unfit", "unresolvable") and expect[kind] is not True:
        raise CaseFormatError(f"expect.{kind} must be true")
    if kind == "error":
        error = expect["error"]
        if not isinstance(error, dict) or not isinstance(error.get("kind"), str) or "contains" not in error:
            raise CaseFormatError("expect.error must be {kind, contains}")
    if kind == "results":
        results = expect["results"]
        if not isinstance(results, dict) or set(results) != set(allocate):
            raise CaseFormatError(f"expect.results must have exactly one entry per allocate claim {list(allocate)}")
        for claim, result in results.items():
            if not isinstance(result, dict) or "devices" not in result or set(result) - _RESULT_KEYS:
                raise CaseFormatError(f"expect.results.{claim} must be {{devices, nodeSelector?, config?}}")
            for entry in result["devices"]:
                if not isinstance(entry, dict) or {"request", "device"} - set(entry) or set(entry) - _DEVICE_KEYS:
                    raise CaseFormatError(f"expect.results.{claim}.devices entry {entry!r} is malformed")
                parse_device_id(entry["device"])


# --- running ----------------------------------------------------------------------------------


@dataclass
class DecodedCase:
    """The production model objects of one case, decoded once and shared by the cold and warm run."""

    classes: dict[str, Any]
    slices: list[Any]
    claims: dict[str, Any]
    allocated_claims: list[Any]


def make_features(case: Case) -> Any:
    from extender.core.model import Features

    known = {f.name for f in dataclasses.fields(Features)}
    missing = sorted(set(case.features) - known)
    if missing:
        raise UnsupportedCase(f"feature(s) {missing} not supported by the allocator")
    return Features(**case.features)


def decode_case(case: Case, raw_objects: Sequence[Mapping[str, Any]]) -> DecodedCase:
    from extender.core import convert
    from extender.core.model import DeviceClass, ResourceClaim, ResourceSlice

    decoded = DecodedCase(classes={}, slices=[], claims={}, allocated_claims=[])
    wanted = set(case.claim_keys)
    for raw in raw_objects:
        obj = convert.decode_object(dict(raw))
        if isinstance(obj, DeviceClass):
            decoded.classes[obj.name] = obj
        elif isinstance(obj, ResourceSlice):
            decoded.slices.append(obj)
        elif isinstance(obj, ResourceClaim):
            if obj.key in wanted:
                decoded.claims[obj.key] = obj
            elif obj.allocation is not None:
                # Like the scheduler's claim tracker: other allocated claims hold their devices.
                decoded.allocated_claims.append(obj)
    absent = [key for key in case.claim_keys if key not in decoded.claims]
    if absent:
        raise CaseFormatError(f"allocate names claims that are not in objects: {absent}")
    return decoded


def build_allocated_state(case: Case, decoded: DecodedCase) -> Any:
    from extender.core.model import AllocatedState, DeviceID

    state = AllocatedState()
    for text in case.allocated:
        state.devices.add(DeviceID(*parse_device_id(text)))
    for claim in decoded.allocated_claims:
        state.add_allocation(claim.allocation)
    return state


def _state_snapshot(state: Any) -> tuple[Any, ...]:
    return (
        frozenset(state.devices),
        frozenset(state.shared_ids),
        {key: dict(value) for key, value in state.consumed_capacity.items()},
    )


def run_case(case: Case, decoded: DecodedCase, features: Any, selectors: Any) -> Outcome:
    """One ``allocate()`` call on the case's node with the given selector cache."""
    from extender.core import errors
    from extender.core.allocator import Allocator
    from extender.core.convert import encode_allocation_result
    from extender.core.model import NodeInfo
    from extender.core.pools import SliceSnapshot

    state = build_allocated_state(case, decoded)
    state_before = _state_snapshot(state)
    node = NodeInfo(name=case.node["name"], labels=dict(case.node.get("labels") or {}))
    claims = [decoded.claims[key] for key in case.claim_keys]
    by_key = {claim.key: claim for claim in decoded.allocated_claims}
    missing = [ref for ref in case.preallocated if claim_key(ref) not in by_key]
    if missing:
        raise CaseFormatError(f"preallocated names claims without status.allocation in objects: {missing}")
    allocator = Allocator(
        claims,
        preallocated=[by_key[claim_key(ref)] for ref in case.preallocated],
        classes=decoded.classes,
        snapshot=SliceSnapshot(decoded.slices),
        allocated=state,
        features=features,
        selectors=selectors,
    )
    try:
        allocation = allocator.allocate(node)
    except NotImplementedError as exc:
        raise UnsupportedCase(f"allocator cannot run this case: {exc}") from exc
    except errors.NodeUnresolvable as exc:
        outcome = Outcome(kind="unresolvable", error_text=str(exc), search_steps=allocator.search_steps)
    except errors.ExtenderError as exc:
        outcome = Outcome(
            kind="error",
            error_class=type(exc).__name__,
            error_classes=tuple(c.__name__ for c in type(exc).__mro__),
            error_text=str(exc),
            search_steps=allocator.search_steps,
        )
    else:
        if allocation is None:
            outcome = Outcome(kind="unfit", search_steps=allocator.search_steps)
        else:
            assert allocation.node == node.name, f"Allocation.node {allocation.node!r} != {node.name!r}"
            assert len(allocation.results) == len(claims), f"{len(allocation.results)} results for {len(claims)} claims"
            results = {
                ref: encode_allocation_result(result, ENCODE_VERSION)
                for ref, result in zip(case.allocate, allocation.results, strict=True)
            }
            outcome = Outcome(kind="results", results=results, search_steps=allocator.search_steps)
    assert _state_snapshot(state) == state_before, "the allocator changed the AllocatedState it was given"
    return outcome


# --- checking ---------------------------------------------------------------------------------


def check_case(case: Case) -> None:
    """Run ``case`` cold and warm and assert everything the table promises."""
    from extender.core.cel import SelectorCache

    features = make_features(case)
    pristine = copy.deepcopy(list(case.objects))
    working = copy.deepcopy(pristine)
    decoded = decode_case(case, working)
    selectors = SelectorCache(consumable_capacity=features.consumable_capacity)

    cold = run_case(case, decoded, features, selectors)
    stats_before = _stats(selectors)
    warm = run_case(case, decoded, features, selectors)
    stats_after = _stats(selectors)

    assert working == pristine, f"case {case.name}: decoding or allocating changed the raw objects"
    _assert_runs_agree(case, cold, warm)
    if cold.kind != "error" and stats_before is not None and stats_after is not None:
        evaluated = stats_after["result_misses"] - stats_before["result_misses"]
        assert evaluated == 0, (
            f"case {case.name}: the warm run evaluated CEL {evaluated} time(s); every selector result "
            "should have come from the SelectorCache"
        )
    compare_outcome(case, cold)


def _stats(selectors: Any) -> dict[str, int] | None:
    stats = getattr(selectors, "stats", None)
    if stats is None:
        return None
    return {name: int(getattr(stats, name, 0)) for name in ("compile_misses", "result_misses")}


def _mask_share_ids(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Share IDs are fresh UUIDs on every run: compare only that one is present."""
    masked = copy.deepcopy(results)
    for result in masked.values():
        for entry in result.get("devices", {}).get("results", []):
            if "shareID" in entry:
                entry["shareID"] = "<uuid>"
    return masked


def _assert_runs_agree(case: Case, cold: Outcome, warm: Outcome) -> None:
    same = (
        cold.kind == warm.kind
        and cold.error_class == warm.error_class
        and cold.error_text == warm.error_text
        and cold.search_steps == warm.search_steps
        and _mask_share_ids(cold.results) == _mask_share_ids(warm.results)
    )
    assert same, (
        f"case {case.name}: cold and warm SelectorCache runs disagree\n"
        f"--- cold (steps {cold.search_steps}):\n{cold.describe()}\n"
        f"--- warm (steps {warm.search_steps}):\n{warm.describe()}"
    )


def compare_outcome(case: Case, actual: Outcome) -> None:
    """Compare one run's outcome with ``case.expect``; assertion messages show both sides."""
    expect = case.expect
    header = f"case {case.name} ({case.source}): {case.why}"
    expected_kind = next(k for k in _EXPECT_KINDS if k in expect)
    if expected_kind != actual.kind:
        raise AssertionError(
            f"{header}\nexpected {expected_kind}:\n{_dump(expect[expected_kind])}\nactual {actual.describe()}"
        )
    if expected_kind == "unresolvable":
        assert actual.error_text is not None and UNRESOLVABLE_TEXT in actual.error_text, (
            f"{header}\nexpected NodeUnresolvable with {UNRESOLVABLE_TEXT!r}, actual {actual.error_text!r}"
        )
    elif expected_kind == "error":
        want = expect["error"]
        assert want["kind"] in actual.error_classes, (
            f"{header}\nexpected error kind {want['kind']}, actual {actual.error_class}: {actual.error_text}"
        )
        fragments = want["contains"] if isinstance(want["contains"], list) else [want["contains"]]
        for fragment in fragments:
            assert actual.error_text is not None and fragment in actual.error_text, (
                f"{header}\nexpected error text to contain:\n  {fragment}\nactual:\n  {actual.error_text}"
            )
    elif expected_kind == "results":
        for ref, want in expect["results"].items():
            _compare_result(f"{header}\nclaim {ref}", want, actual.results[ref])
    work = case.work or {}
    if "search_steps" in work:
        assert actual.search_steps == work["search_steps"], (
            f"{header}\nexpected search_steps {work['search_steps']}, actual {actual.search_steps}"
        )


def _compare_result(header: str, want: Mapping[str, Any], got: Mapping[str, Any]) -> None:
    got_entries = list(got.get("devices", {}).get("results", []) or [])
    _match_devices(header, list(want["devices"]), got_entries)
    if "nodeSelector" in want:
        want_sel = want["nodeSelector"]
        got_sel = got.get("nodeSelector")
        if want_sel is None:
            assert got_sel is None, f"{header}\nexpected no nodeSelector, actual:\n{_dump(got_sel)}"
        else:
            assert got_sel is not None and normalize_node_selector(got_sel) == normalize_node_selector(want_sel), (
                f"{header}\nnodeSelector differs\nexpected:\n{_dump(want_sel)}\nactual:\n{_dump(got_sel)}"
            )
    if "config" in want:
        want_cfg = [_normalize_config(c) for c in want["config"] or []]
        got_cfg = [_normalize_config(c) for c in got.get("devices", {}).get("config", []) or []]
        assert want_cfg == got_cfg, (
            f"{header}\nconfig differs (order matters)\nexpected:\n{_dump(want_cfg)}\nactual:\n{_dump(got_cfg)}"
        )


def _match_devices(header: str, want: list[Mapping[str, Any]], got: list[Mapping[str, Any]]) -> None:
    """Pair expected with actual entries regardless of order (small backtracking matcher)."""
    message = f"{header}\ndevices differ (order ignored)\nexpected:\n{_dump(want)}\nactual:\n{_dump(got)}"
    assert len(want) == len(got), message
    used = [False] * len(got)

    def assign(i: int) -> bool:
        if i == len(want):
            return True
        for j, entry in enumerate(got):
            if not used[j] and device_entry_matches(want[i], entry):
                used[j] = True
                if assign(i + 1):
                    return True
                used[j] = False
        return False

    assert assign(0), message


def device_entry_matches(want: Mapping[str, Any], got: Mapping[str, Any]) -> bool:
    """Does one actual ``results[]`` entry satisfy one expected entry (optional keys only when given)?"""
    driver, pool, device = parse_device_id(want["device"])
    if (got.get("request"), got.get("driver"), got.get("pool"), got.get("device")) != (
        want["request"],
        driver,
        pool,
        device,
    ):
        return False
    if "adminAccess" in want and bool(got.get("adminAccess", False)) != want["adminAccess"]:
        return False
    if "shareID" in want:
        share = got.get("shareID")
        if want["shareID"] != (share is not None):
            return False
        if share is not None and not _UUID_RE.match(str(share)):
            return False
    if "consumedCapacity" in want and not _quantities_equal(
        want["consumedCapacity"] or {}, got.get("consumedCapacity") or {}
    ):
        return False
    if "tolerations" in want and [_normalize_toleration(t) for t in want["tolerations"] or []] != [
        _normalize_toleration(t) for t in got.get("tolerations") or []
    ]:
        return False
    for key in ("bindingConditions", "bindingFailureConditions"):
        if key in want and list(want[key] or []) != list(got.get(key) or []):
            return False
    return True


def _quantities_equal(want: Mapping[str, Any], got: Mapping[str, Any]) -> bool:
    if set(want) != set(got):
        return False
    from extender.core.quantity import Quantity

    return all(Quantity.parse(str(want[k])) == Quantity.parse(str(got[k])) for k in want)


def _normalize_toleration(toleration: Mapping[str, Any]) -> dict[str, Any]:
    """API defaulting: operator Equal; empty strings and null mean unset."""
    out = {k: v for k, v in toleration.items() if v not in ("", None)}
    out.setdefault("operator", "Equal")
    return out


def normalize_node_selector(selector: Mapping[str, Any]) -> list[dict[str, list[tuple[Any, ...]]]]:
    """Terms, requirements and values compared as sets, as upstream's test matchers do."""
    terms = []
    for term in selector.get("nodeSelectorTerms") or []:
        norm = {}
        for key in ("matchExpressions", "matchFields"):
            reqs = [(r["key"], r["operator"], tuple(sorted(r.get("values") or []))) for r in term.get(key) or []]
            norm[key] = sorted(reqs)
        terms.append(norm)
    return sorted(terms, key=lambda t: json.dumps(t, sort_keys=True))


def _normalize_config(config: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "source": config.get("source"),
        "requests": list(config.get("requests") or []),
        "opaque": config.get("opaque"),
    }


def _dump(value: Any) -> str:
    return yaml.safe_dump(_plain(value), sort_keys=False, default_flow_style=False, width=110).rstrip()


def _plain(value: Any) -> Any:
    """Make tuples and other non-YAML values dumpable."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)
