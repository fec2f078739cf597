"""core/v1 NodeSelector matching, as kube does it (k8s.io/component-helpers/scheduling/corev1/nodeaffinity).

- Terms are ORed. A term without requirements matches nothing (and is not validated), so a
  selector without usable terms matches no node.
- Inside a term, ``matchExpressions`` (on node labels) and ``matchFields`` are ANDed.
- Operators: In, NotIn, Exists, DoesNotExist, Gt, Lt (labels.NewRequirement's rules: In/NotIn need
  values, Exists/DoesNotExist none, Gt/Lt exactly one int64; label keys must be qualified names
  and every value a valid label value).
- ``matchFields`` supports only ``metadata.name`` with In/NotIn and exactly one value.
- Like upstream's ``NewNodeSelector``, a malformed requirement in *any* term makes the whole
  selector an error (:class:`ValueError`), even when another term would match.

QUIRK (upstream): because every value must also be a valid label value, a negative Gt/Lt
threshold (``Gt ["-1"]``) is an error, although API validation accepts it.
QUIRK (upstream): ``matchFields`` is ignored for a node without a name (fields set is empty).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Final

from extender.core.model import NodeInfo, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm

__all__ = [
    "node_matches",
    "pinned_node_names",
    "selector_matches_labels",
    "term_matches",
    "validate_node_selector",
    "validate_term",
]

OP_IN: Final = "In"
OP_NOT_IN: Final = "NotIn"
OP_EXISTS: Final = "Exists"
OP_DOES_NOT_EXIST: Final = "DoesNotExist"
OP_GT: Final = "Gt"
OP_LT: Final = "Lt"
_LABEL_OPERATORS: Final = frozenset({OP_IN, OP_NOT_IN, OP_EXISTS, OP_DOES_NOT_EXIST, OP_GT, OP_LT})
_FIELD_OPERATORS: Final = frozenset({OP_IN, OP_NOT_IN})
NODE_NAME_FIELD: Final = "metadata.name"

_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1

_NAME_PART: Final = re.compile(r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS1123_LABEL: Final = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN: Final = re.compile(rf"{_DNS1123_LABEL}(?:\.{_DNS1123_LABEL})*")
_DNS1123_SUBDOMAIN_MAX: Final = 253
_NAME_MAX: Final = 63

#: Selectors already validated, by identity. Selectors are immutable and decoded once at ingest,
#: so this turns validation into one dict lookup on the allocator's per-node path. The value
#: keeps the selector alive, so an id cannot be reused while its entry exists.
_validated: dict[int, NodeSelector] = {}
_VALIDATED_MAX: Final = 8192


# --- public API -----------------------------------------------------------------------------


def node_matches(selector: NodeSelector, node: NodeInfo) -> bool:
    """Whether ``node`` satisfies ``selector``; ValueError if the selector is malformed."""
    if _validated.get(id(selector)) is not selector:
        validate_node_selector(selector)
    return any(_term_matches_unchecked(term, node) for term in selector.terms)


def pinned_node_names(selector: NodeSelector) -> frozenset[str] | None:
    """The only node names ``selector`` can match when it selects by name alone — every non-empty
    term is ``matchFields: metadata.name In [...]``, as allocation results write it — else None
    (also for a malformed selector: ``node_matches`` reports that). Callers can then pass over
    every other node without matching it."""
    try:
        validate_node_selector(selector)
    except ValueError:
        return None
    names: set[str] = set()
    for term in selector.terms:
        if term.match_expressions:
            return None
        if not term.match_fields:
            continue  # an empty term matches nothing
        if any(requirement.operator != OP_IN for requirement in term.match_fields):
            return None
        values = {requirement.values[0] for requirement in term.match_fields}
        if len(values) == 1:  # one term pinning two different names matches no node
            names |= values
    return frozenset(names)


def term_matches(term: NodeSelectorTerm, node: NodeInfo) -> bool:
    """Whether ``node`` satisfies one term; an empty term matches nothing. ValueError if malformed."""
    validate_term(term)
    return _term_matches_unchecked(term, node)


def selector_matches_labels(selector: NodeSelector, name: str, labels: Mapping[str, str]) -> bool:
    """:func:`node_matches` for callers that hold a name and labels rather than a NodeInfo."""
    return node_matches(selector, NodeInfo(name=name, labels=labels))


def validate_node_selector(selector: NodeSelector) -> None:
    """Raise ValueError naming the first problem of any non-empty term (upstream NewNodeSelector)."""
    key = id(selector)
    if _validated.get(key) is selector:
        return
    for index, term in enumerate(selector.terms):
        _validate_term(term, f"nodeSelectorTerms[{index}]")
    if len(_validated) >= _VALIDATED_MAX:
        _validated.clear()
    _validated[key] = selector


def validate_term(term: NodeSelectorTerm) -> None:
    """Raise ValueError if a non-empty term has a malformed requirement."""
    _validate_term(term, "nodeSelectorTerm")


# --- matching ---------------------------------------------------------------------------------


def _term_matches_unchecked(term: NodeSelectorTerm, node: NodeInfo) -> bool:
    if not term.match_expressions and not term.match_fields:
        return False
    labels = node.labels
    for requirement in term.match_expressions:
        if not _label_requirement_matches(requirement, labels):
            return False
    # Upstream only builds a fields set from a non-empty name; with none, matchFields is skipped.
    if node.name:
        for requirement in term.match_fields:
            value = requirement.values[0]
            if (node.name == value) != (requirement.operator == OP_IN):
                return False
    return True


def _label_requirement_matches(requirement: NodeSelectorRequirement, labels: Mapping[str, str]) -> bool:
    operator = requirement.operator
    value = labels.get(requirement.key)
    if operator == OP_IN:
        return value is not None and value in requirement.values
    if operator == OP_NOT_IN:
        return value is None or value not in requirement.values
    if operator == OP_EXISTS:
        return value is not None
    if operator == OP_DOES_NOT_EXIST:
        return value is None
    # Gt / Lt: a missing or non-integer label never matches.
    if value is None:
        return False
    label_number = _parse_int64(value)
    if label_number is None:
        return False
    threshold = _parse_int64(requirement.values[0])
    if threshold is None:  # cannot happen after validation; never match rather than guess
        return False
    return label_number > threshold if operator == OP_GT else label_number < threshold


# --- validation -------------------------------------------------------------------------------


def _validate_term(term: NodeSelectorTerm, path: str) -> None:
    if not term.match_expressions and not term.match_fields:
        return  # an empty term selects nothing and is never parsed upstream
    for index, requirement in enumerate(term.match_expressions):
        problem = _label_requirement_problem(requirement)
        if problem is not None:
            raise ValueError(f"{path}.matchExpressions[{index}].{problem}")
    for index, requirement in enumerate(term.match_fields):
        problem = _field_requirement_problem(requirement)
        if problem is not None:
            raise ValueError(f"{path}.matchFields[{index}].{problem}")


def _label_requirement_problem(requirement: NodeSelectorRequirement) -> str | None:
    """What is wrong with a matchExpressions entry (labels.NewRequirement's checks), or None."""
    operator, values = requirement.operator, requirement.values
    if operator not in _LABEL_OPERATORS:
        return (
            f'operator: Unsupported value: "{operator}": supported values: '
            '"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"'
        )
    key_problem = _label_key_problem(requirement.key)
    if key_problem is not None:
        return f"key: Invalid value: {_quote(requirement.key)}: {key_problem}"
    if operator in (OP_IN, OP_NOT_IN):
        if not values:
            return "values: Invalid value: []: for 'in', 'notin' operators, values set can't be empty"
    elif operator in (OP_EXISTS, OP_DOES_NOT_EXIST):
        if values:
            return (
                f"values: Invalid value: {_quote_list(values)}: values set must be empty for exists and does not exist"
            )
    else:
        if len(values) != 1:
            return (
                f"values: Invalid value: {_quote_list(values)}: for 'Gt', 'Lt' operators, exactly one value is required"
            )
        if _parse_int64(values[0]) is None:
            return (
                f"values[0]: Invalid value: {_quote(values[0])}: for 'Gt', 'Lt' operators, the value must be an integer"
            )
    for index, value in enumerate(values):
        value_problem = _label_value_problem(value)
        if value_problem is not None:
            return f"values[{index}]: Invalid value: {_quote(value)}: {value_problem}"
    return None


def _field_requirement_problem(requirement: NodeSelectorRequirement) -> str | None:
    """What is wrong with a matchFields entry, or None (only metadata.name In/NotIn one value)."""
    if requirement.operator not in _FIELD_OPERATORS:
        return f'operator: Unsupported value: "{requirement.operator}": supported values: "In", "NotIn"'
    if requirement.key != NODE_NAME_FIELD:
        return f"key: Invalid value: {_quote(requirement.key)}: not a valid field selector key"
    if len(requirement.values) != 1:
        return f"values: Invalid value: {_quote_list(requirement.values)}: must have one element"
    return None


@lru_cache(maxsize=4096)
def _label_key_problem(key: str) -> str | None:
    """validation.IsQualifiedName: ``[prefix/]name``, prefix a DNS-1123 subdomain."""
    prefix, slash, name = key.rpartition("/")
    if slash:
        if "/" in prefix:
            return "a qualified name must consist of an optional DNS subdomain prefix and a name"
        if not prefix:
            return "prefix part must be non-empty"
        if len(prefix) > _DNS1123_SUBDOMAIN_MAX:
            return f"prefix part must be no more than {_DNS1123_SUBDOMAIN_MAX} characters"
        if not _DNS1123_SUBDOMAIN.fullmatch(prefix):
            return "prefix part must be a lowercase RFC 1123 subdomain"
    if not name:
        return "name part must be non-empty"
    if len(name) > _NAME_MAX:
        return f"name part must be no more than {_NAME_MAX} characters"
    if not _NAME_PART.fullmatch(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character"
        )
    return None


@lru_cache(maxsize=4096)
def _label_value_problem(value: str) -> str | None:
    """validation.IsValidLabelValue: empty, or up to 63 name characters."""
    if not value:
        return None
    if len(value) > _NAME_MAX:
        return f"must be no more than {_NAME_MAX} characters"
    if not _NAME_PART.fullmatch(value):
        return (
            "a valid label must be an empty string or consist of alphanumeric characters, "
            "'-', '_' or '.', and must start and end with an alphanumeric character"
        )
    return None


def _parse_int64(text: str) -> int | None:
    """Go's ``strconv.ParseInt(text, 10, 64)``: optional sign, ASCII digits, int64 range."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or not digits.isascii() or not digits.isdigit():
        return None
    number = int(text)
    return number if _INT64_MIN <= number <= _INT64_MAX else None


def _quote(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def _quote_list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(_quote(value) for value in values) + "]"
