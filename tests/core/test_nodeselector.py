"""Tests for ``extender.core.nodeselector``: core/v1 NodeSelector matching and validation as kube's
nodeaffinity helper does it (terms ORed, requirements ANDed, empty terms match nothing; the six
label operators; matchFields on metadata.name; labels.NewRequirement's validation rules).

How pools use these results (slice and device node selection) is tested with the pools/allocator.
"""

from __future__ import annotations

import pytest

from extender.core.model import NodeInfo, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm
from extender.core.nodeselector import (
    node_matches,
    pinned_node_names,
    selector_matches_labels,
    term_matches,
    validate_node_selector,
    validate_term,
)

NODE = NodeInfo(
    name="node-1",
    labels={
        "region": "region-1",
        "zone": "zone-a",
        "gpu.example.com/count": "4",
        "kubernetes.io/hostname": "node-1",
        "negative": "-3",
        "empty": "",
        "word": "four",
    },
)


def req(key: str, operator: str, *values: str) -> NodeSelectorRequirement:
    return NodeSelectorRequirement(key=key, operator=operator, values=values)


def field(operator: str, *values: str, key: str = "metadata.name") -> NodeSelectorRequirement:
    return NodeSelectorRequirement(key=key, operator=operator, values=values)


def term(*expressions: NodeSelectorRequirement, fields: tuple[NodeSelectorRequirement, ...] = ()) -> NodeSelectorTerm:
    return NodeSelectorTerm(match_expressions=expressions, match_fields=fields)


def selector(*terms: NodeSelectorTerm) -> NodeSelector:
    return NodeSelector(terms=terms)


# --- one requirement at a time ------------------------------------------------------------------------

REQUIREMENTS = [
    # In / NotIn
    ("in-match", req("region", "In", "region-1"), True),
    ("in-one-of-several", req("region", "In", "region-0", "region-1"), True),
    ("in-other-value", req("region", "In", "region-2"), False),
    ("in-missing-label", req("missing", "In", "x"), False),
    ("in-empty-value-matches-empty-label", req("empty", "In", ""), True),
    ("in-empty-value-missing-label", req("missing", "In", ""), False),
    ("notin-match", req("region", "NotIn", "region-1"), False),
    ("notin-other-value", req("region", "NotIn", "region-2", "region-3"), True),
    ("notin-missing-label-matches", req("missing", "NotIn", "x"), True),
    # Exists / DoesNotExist
    ("exists", req("zone", "Exists"), True),
    ("exists-empty-label", req("empty", "Exists"), True),
    ("exists-missing", req("missing", "Exists"), False),
    ("doesnotexist-missing", req("missing", "DoesNotExist"), True),
    ("doesnotexist-present", req("zone", "DoesNotExist"), False),
    # Gt / Lt compare as int64
    ("gt-true", req("gpu.example.com/count", "Gt", "3"), True),
    ("gt-equal-is-false", req("gpu.example.com/count", "Gt", "4"), False),
    ("gt-false", req("gpu.example.com/count", "Gt", "10"), False),
    ("lt-true", req("gpu.example.com/count", "Lt", "10"), True),
    ("lt-equal-is-false", req("gpu.example.com/count", "Lt", "4"), False),
    ("lt-numeric-not-lexical", req("gpu.example.com/count", "Lt", "30"), True),
    ("gt-leading-zeros", req("gpu.example.com/count", "Gt", "0003"), True),
    ("gt-negative-label", req("negative", "Lt", "0"), True),
    ("gt-missing-label", req("missing", "Gt", "0"), False),
    ("lt-missing-label", req("missing", "Lt", "100"), False),
    ("gt-non-integer-label", req("word", "Gt", "0"), False),
    ("lt-non-integer-label", req("word", "Lt", "100"), False),
    ("gt-empty-label", req("empty", "Gt", "0"), False),
    ("gt-int64-max", req("gpu.example.com/count", "Lt", "9223372036854775807"), True),
]


@pytest.mark.parametrize(("requirement", "expected"), [c[1:] for c in REQUIREMENTS], ids=[c[0] for c in REQUIREMENTS])
def test_single_label_requirement(requirement: NodeSelectorRequirement, expected: bool) -> None:
    assert term_matches(term(requirement), NODE) is expected
    assert node_matches(selector(term(requirement)), NODE) is expected


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        ("9223372036854775807", True),
        ("9223372036854775808", False),  # does not parse as int64: never matches
        ("1e3", False),
        (" 5", False),
        ("5_0", False),
        ("\u0665", False),  # ARABIC-INDIC DIGIT FIVE is not a Go digit
    ],
)
def test_gt_parses_labels_like_go_parseint(label: str, expected: bool) -> None:
    node = NodeInfo(name="n", labels={"count": label})
    assert term_matches(term(req("count", "Gt", "1")), node) is expected


FIELDS = [
    ("in-own-name", field("In", "node-1"), True),
    ("in-other-name", field("In", "node-2"), False),
    ("notin-own-name", field("NotIn", "node-1"), False),
    ("notin-other-name", field("NotIn", "node-2"), True),
]


@pytest.mark.parametrize(("requirement", "expected"), [c[1:] for c in FIELDS], ids=[c[0] for c in FIELDS])
def test_match_fields_on_node_name(requirement: NodeSelectorRequirement, expected: bool) -> None:
    assert term_matches(term(fields=(requirement,)), NODE) is expected


def test_match_fields_are_ignored_for_a_node_without_a_name() -> None:
    # QUIRK (upstream): the fields set is only built from a non-empty name, and matchFields is
    # skipped when that set is empty. Kept as upstream has it; real nodes always have names.
    nameless = NodeInfo(name="", labels={"region": "region-1"})
    assert term_matches(term(fields=(field("In", "node-1"),)), nameless) is True
    assert term_matches(term(req("region", "In", "region-2"), fields=(field("In", "node-1"),)), nameless) is False


# --- combining ---------------------------------------------------------------------------------------------


def test_requirements_in_a_term_are_anded() -> None:
    both = term(req("region", "In", "region-1"), req("zone", "In", "zone-a"))
    one_wrong = term(req("region", "In", "region-1"), req("zone", "In", "zone-b"))
    assert term_matches(both, NODE) is True
    assert term_matches(one_wrong, NODE) is False


def test_expressions_and_fields_are_anded() -> None:
    assert term_matches(term(req("region", "In", "region-1"), fields=(field("In", "node-1"),)), NODE) is True
    assert term_matches(term(req("region", "In", "region-1"), fields=(field("In", "node-2"),)), NODE) is False
    assert term_matches(term(req("region", "In", "region-2"), fields=(field("In", "node-1"),)), NODE) is False


def test_several_field_requirements_are_anded() -> None:
    assert term_matches(term(fields=(field("In", "node-1"), field("NotIn", "node-2"))), NODE) is True
    assert term_matches(term(fields=(field("In", "node-1"), field("NotIn", "node-1"))), NODE) is False


def test_terms_are_ored() -> None:
    wrong = term(req("region", "In", "region-2"))
    right = term(req("zone", "In", "zone-a"))
    assert node_matches(selector(wrong, right), NODE) is True
    assert node_matches(selector(right, wrong), NODE) is True
    assert node_matches(selector(wrong, wrong), NODE) is False


def test_an_empty_term_matches_nothing() -> None:
    assert term_matches(NodeSelectorTerm(), NODE) is False
    assert node_matches(selector(NodeSelectorTerm()), NODE) is False
    # ...but does not hide another term that matches.
    assert node_matches(selector(NodeSelectorTerm(), term(req("zone", "Exists"))), NODE) is True


def test_a_selector_without_terms_matches_nothing() -> None:
    assert node_matches(selector(), NODE) is False


def test_node_without_labels() -> None:
    bare = NodeInfo(name="bare")
    assert node_matches(selector(term(req("region", "NotIn", "x"))), bare) is True
    assert node_matches(selector(term(req("region", "DoesNotExist"))), bare) is True
    assert node_matches(selector(term(req("region", "Exists"))), bare) is False


def test_selector_matches_labels_helper() -> None:
    sel = selector(term(req("region", "In", "r1"), fields=(field("In", "n1"),)))
    assert selector_matches_labels(sel, "n1", {"region": "r1"}) is True
    assert selector_matches_labels(sel, "n2", {"region": "r1"}) is False


# --- validation ---------------------------------------------------------------------------------------------

MALFORMED = [
    ("unknown-operator", req("region", "Equals", "x"), "operator: Unsupported value"),
    ("lowercase-operator", req("region", "in", "x"), "operator: Unsupported value"),
    ("in-without-values", req("region", "In"), "values set can't be empty"),
    ("notin-without-values", req("region", "NotIn"), "values set can't be empty"),
    ("exists-with-values", req("region", "Exists", "x"), "values set must be empty"),
    ("doesnotexist-with-values", req("region", "DoesNotExist", "x"), "values set must be empty"),
    ("gt-without-value", req("count", "Gt"), "exactly one value is required"),
    ("lt-two-values", req("count", "Lt", "1", "2"), "exactly one value is required"),
    ("gt-not-integer", req("count", "Gt", "four"), "the value must be an integer"),
    ("gt-decimal", req("count", "Gt", "1.5"), "the value must be an integer"),
    ("gt-beyond-int64", req("count", "Gt", "9223372036854775808"), "the value must be an integer"),
    ("gt-empty-string", req("count", "Gt", ""), "the value must be an integer"),
    # QUIRK (upstream): Gt/Lt values must also be valid label values, so negatives fail.
    ("gt-negative-threshold", req("count", "Gt", "-1"), "a valid label must be"),
    ("lt-plus-sign-threshold", req("count", "Lt", "+1"), "a valid label must be"),
    ("empty-key", req("", "Exists"), "key: Invalid value"),
    ("key-with-space", req("my key", "Exists"), "key: Invalid value"),
    ("key-two-slashes", req("a/b/c", "Exists"), "key: Invalid value"),
    ("key-empty-prefix", req("/name", "Exists"), "prefix part must be non-empty"),
    ("key-uppercase-prefix", req("Example.com/name", "Exists"), "prefix part"),
    ("key-empty-name", req("example.com/", "Exists"), "name part must be non-empty"),
    ("key-name-too-long", req("a" * 64, "Exists"), "name part must be no more than 63"),
    ("key-prefix-too-long", req("a" * 254 + "/b", "Exists"), "prefix part must be no more than 253"),
    ("value-too-long", req("region", "In", "a" * 64), "must be no more than 63"),
    ("value-with-space", req("region", "In", "a b"), "a valid label must be"),
    ("value-bad-second", req("region", "NotIn", "ok", "-bad"), "values[1]"),
]


@pytest.mark.parametrize(("requirement", "problem"), [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_malformed_label_requirement_raises(requirement: NodeSelectorRequirement, problem: str) -> None:
    with pytest.raises(ValueError, match="matchExpressions\\[0\\]") as info:
        node_matches(selector(term(requirement)), NODE)
    assert problem in str(info.value)
    with pytest.raises(ValueError):
        term_matches(term(requirement), NODE)


EDGE_NODE = NodeInfo(
    name="edge",
    labels={"example.com/name": "x", "a.b-c.example.com/Na_me.x-1": "y", "a" * 63: "z", "region": "", "count": "5"},
)


@pytest.mark.parametrize(
    ("requirement", "expected"),
    [
        (req("example.com/name", "Exists"), True),
        (req("a.b-c.example.com/Na_me.x-1", "Exists"), True),
        (req("a" * 63, "Exists"), True),
        (req("region", "In", ""), True),  # the empty value is a valid label value
        (req("region", "In", "A-b_c.9"), False),
        (req("count", "Gt", "0"), True),
        (req("count", "Lt", "9223372036854775807"), True),
    ],
    ids=lambda r: f"{r.key[:20]}-{r.operator}" if isinstance(r, NodeSelectorRequirement) else str(r),
)
def test_well_formed_edge_requirements_are_accepted(requirement: NodeSelectorRequirement, expected: bool) -> None:
    validate_term(term(requirement))  # raises for a malformed requirement
    assert node_matches(selector(term(requirement)), EDGE_NODE) is expected


MALFORMED_FIELDS = [
    ("other-key", field("In", "x", key="metadata.uid"), "not a valid field selector key"),
    ("label-like-key", field("In", "node-1", key="kubernetes.io/hostname"), "not a valid field selector key"),
    ("exists", field("Exists"), "operator: Unsupported value"),
    ("gt", field("Gt", "1"), "operator: Unsupported value"),
    ("in-no-values", field("In"), "must have one element"),
    ("in-two-values", field("In", "node-1", "node-2"), "must have one element"),
    ("notin-two-values", field("NotIn", "a", "b"), "must have one element"),
]


@pytest.mark.parametrize(
    ("requirement", "problem"), [c[1:] for c in MALFORMED_FIELDS], ids=[c[0] for c in MALFORMED_FIELDS]
)
def test_malformed_field_requirement_raises(requirement: NodeSelectorRequirement, problem: str) -> None:
    with pytest.raises(ValueError, match="matchFields\\[0\\]") as info:
        node_matches(selector(term(fields=(requirement,))), NODE)
    assert problem in str(info.value)


def test_a_malformed_term_fails_the_selector_even_when_another_term_matches() -> None:
    # Upstream's NewNodeSelector parses every term first and reports any error.
    good = term(req("region", "In", "region-1"))
    bad = term(req("region", "In"))
    with pytest.raises(ValueError, match=r"nodeSelectorTerms\[1\]\.matchExpressions\[0\]"):
        node_matches(selector(good, bad), NODE)
    with pytest.raises(ValueError, match=r"nodeSelectorTerms\[0\]"):
        validate_node_selector(selector(bad, good))


def test_error_names_the_failing_requirement_position() -> None:
    sel = selector(term(req("region", "In", "r"), req("zone", "Exists"), fields=(field("In", "a"), field("In"))))
    with pytest.raises(ValueError, match=r"nodeSelectorTerms\[0\]\.matchFields\[1\]\.values"):
        node_matches(sel, NODE)


def test_empty_terms_are_not_validated() -> None:
    validate_node_selector(selector(NodeSelectorTerm()))  # raises for a malformed term
    validate_term(NodeSelectorTerm())
    # accepted, and an empty term still matches no node (upstream's rule)
    assert node_matches(selector(NodeSelectorTerm()), NODE) is False


def test_validation_result_is_cached_per_selector_object_without_changing_answers() -> None:
    sel = selector(term(req("region", "In", "region-1")))
    assert node_matches(sel, NODE) is True
    assert node_matches(sel, NodeInfo(name="x", labels={"region": "other"})) is False
    bad = selector(term(req("region", "In")))
    for _ in range(2):  # a malformed selector is never remembered as valid
        with pytest.raises(ValueError):
            node_matches(bad, NODE)
    # An equal but distinct object is validated on its own.
    assert node_matches(selector(term(req("region", "In", "region-1"))), NODE) is True


@pytest.mark.parametrize(
    ("sel", "pinned"),
    [
        (selector(term(fields=(field("In", "node-1"),))), {"node-1"}),
        (selector(term(fields=(field("In", "node-1"),)), term(fields=(field("In", "node-2"),))), {"node-1", "node-2"}),
        (selector(term(fields=(field("In", "node-1"), field("In", "node-2")))), set()),  # both: no node
        (selector(term(fields=(field("In", "node-1"), field("In", "node-1")))), {"node-1"}),
        (selector(term(), term(fields=(field("In", "node-1"),))), {"node-1"}),  # the empty term adds nothing
        (selector(), set()),
        (selector(term(req("zone", "In", "a"), fields=(field("In", "node-1"),))), None),  # labels: match per node
        (selector(term(fields=(field("NotIn", "node-1"),))), None),
        (selector(term(fields=(field("In", "node-1", key="metadata.uid"),))), None),  # malformed
    ],
)
def test_pinned_node_names_agree_with_matching(sel: NodeSelector, pinned: set[str] | None) -> None:
    names = pinned_node_names(sel)
    assert names == (None if pinned is None else frozenset(pinned))
    if names is not None:  # exactly the nodes node_matches accepts, whatever their labels
        for name in ("node-1", "node-2", "node-3"):
            assert node_matches(sel, NodeInfo(name, {"zone": "a"})) == (name in names)
