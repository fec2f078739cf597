"""The extender wire format in ``extender.server.wire``, without HTTP: request parsing (and every
malformed shape it refuses), answer shapes in both nodeCacheCapable modes, score clamping, the
direct encoding of a HostPriorityList (byte for byte orjson's), and the one table mapping error
classes to wire fields. HTTP behaviour is in ``test_routes.py``."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import orjson
import pytest

from extender.core import errors
from extender.server.wire import (
    BadRequest,
    EncodedAnswers,
    WireField,
    binding_result,
    encode_priority_columns,
    encode_priority_list,
    error_filter_result,
    error_text,
    filter_result,
    parse_binding_args,
    parse_extender_args,
    priority_list,
    wire_field,
)
from tests.server.fakes import node_list, pod


@pytest.mark.parametrize(
    ("exc", "field"),
    [
        (errors.NodeUnresolvable("invalid resource pools were encountered"), WireField.FAILED_AND_UNRESOLVABLE_NODES),
        (errors.DoesNotFit("cannot allocate all claims"), WireField.FAILED_NODES),
        (errors.PodUnschedulable("class missing"), WireField.ERROR),
        (errors.CelError("no such key: model"), WireField.ERROR),
        (errors.Transient("retry"), WireField.ERROR),
        (errors.NotSynced("cache not synced yet"), WireField.ERROR),
        (errors.NotLeader("not the leader: lease held by b"), WireField.ERROR),
        (errors.AllocationTimedOut("node n1: timed out trying to allocate devices"), WireField.ERROR),
        (errors.DeadlineExceeded("bind deadline of 25s passed"), WireField.ERROR),
        (errors.ClaimNotCreated("not yet"), WireField.ERROR),
        (errors.EvictionRefused("429: disruption budget"), WireField.ERROR),
        (errors.WriteConflict("409"), WireField.ERROR),
        (errors.ApiUnavailable("503"), WireField.ERROR),
        (errors.OutcomeUnknown("timed out"), WireField.ERROR),
        (errors.ObjectNotFound("gone"), WireField.ERROR),
        (errors.InvalidObject("bad"), WireField.ERROR),
        (errors.ExtenderError("base"), WireField.ERROR),
        (RuntimeError("bug"), WireField.ERROR),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else value.value,
)
def test_every_error_class_has_one_wire_field(exc: BaseException, field: WireField) -> None:
    assert wire_field(exc) is field


def test_every_extender_error_class_is_in_the_table() -> None:
    # a new error class must be placed deliberately: extend the table above when this fails
    known = {
        "ExtenderError", "DoesNotFit", "NodeUnresolvable", "PodUnschedulable", "CelError", "Transient",
        "NotSynced", "ClaimNotCreated", "WriteConflict", "ApiUnavailable", "ObjectNotFound", "InvalidObject",
        "OutcomeUnknown", "NotLeader", "AllocationTimedOut", "DeadlineExceeded", "EvictionRefused",
    }  # fmt: skip
    assert set(errors.__all__) == known


def test_error_text_hides_internals_of_unexpected_exceptions() -> None:
    assert error_text(errors.NotSynced("cache not synced yet")) == "cache not synced yet"
    text = error_text(KeyError("secret/internal"))
    assert "KeyError" in text
    assert "secret" not in text


def test_node_names_request() -> None:
    args = parse_extender_args({"Pod": pod(), "Nodes": None, "NodeNames": ["n1", "n2"]})
    assert args.node_names == ["n1", "n2"]
    assert args.node_list is None
    assert args.names_given
    assert args.pod_key == "default/pod-a"


def test_nodes_request_takes_names_from_the_items() -> None:
    args = parse_extender_args({"Pod": pod(), "Nodes": node_list("n1", "n2"), "NodeNames": None})
    assert args.node_names == ["n1", "n2"]
    assert not args.names_given
    assert [n["metadata"]["name"] for n in args.nodes] == ["n1", "n2"]


def test_empty_node_list_with_null_items() -> None:
    args = parse_extender_args({"Pod": pod(), "Nodes": {"items": None}})
    assert args.node_names == []


def test_pod_namespace_defaults_like_the_api_server() -> None:
    raw = pod()
    del raw["metadata"]["namespace"]
    assert parse_extender_args({"Pod": raw, "NodeNames": []}).pod_key == "default/pod-a"


def _with(path: list[Any], value: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"Pod": pod(), "NodeNames": ["n1"]}
    target = body
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return body


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "request body must be a JSON object, not an array"),
        ("x", "request body must be a JSON object, not a string"),
        ({"NodeNames": ["n1"]}, "Pod is required"),
        ({"Pod": None, "NodeNames": ["n1"]}, "Pod is required"),
        ({"Pod": [], "NodeNames": ["n1"]}, "Pod must be a JSON object"),
        ({"Pod": {}, "NodeNames": ["n1"]}, "Pod.metadata must be a JSON object, not null"),
        ({"Pod": {"metadata": {}}, "NodeNames": ["n1"]}, "Pod.metadata.name must be a non-empty string"),
        (_with(["Pod", "metadata", "namespace"], 3), "Pod.metadata.namespace must be a string"),
        (_with(["Pod", "spec"], "x"), "Pod.spec must be a JSON object"),
        (_with(["Pod", "spec", "resourceClaims"], {}), "Pod.spec.resourceClaims must be an array"),
        (_with(["Pod", "spec", "resourceClaims"], [{"x": 1}]), "Pod.spec.resourceClaims[0].name"),
        (_with(["Pod", "status"], {"resourceClaimStatuses": "x"}), "Pod.status.resourceClaimStatuses must be"),
        ({"Pod": pod()}, "one of Nodes or NodeNames is required"),
        ({"Pod": pod(), "NodeNames": "n1"}, "NodeNames must be an array of non-empty strings"),
        ({"Pod": pod(), "NodeNames": ["n1", 2]}, "NodeNames must be an array of non-empty strings"),
        ({"Pod": pod(), "NodeNames": [""]}, "NodeNames must be an array of non-empty strings"),
        ({"Pod": pod(), "Nodes": ["n1"]}, "Nodes must be a JSON object, not an array"),
        ({"Pod": pod(), "Nodes": {"items": {}}}, "Nodes.items must be an array"),
        ({"Pod": pod(), "Nodes": {"items": [1]}}, "Nodes.items[0] must be a JSON object"),
        ({"Pod": pod(), "Nodes": {"items": [{"metadata": {}}]}}, "Nodes.items[0].metadata.name"),
        (
            {"Pod": pod(), "Nodes": {"items": [{"metadata": {"name": "n", "labels": {"a": 1}}}]}},
            "Nodes.items[0].metadata.labels values must be strings",
        ),
    ],
)
def test_malformed_extender_args_name_the_problem(body: Any, message: str) -> None:
    with pytest.raises(BadRequest) as info:
        parse_extender_args(body)
    assert message in info.value.message


@pytest.mark.parametrize(
    "names",
    [
        [None],
        [0],
        [False],
        [["n1"]],  # truthy but not a string
        [{"name": "n1"}],
        [1.5],
        ["n1", "n2", ""],  # the empty one last
        ["n1", None, "n2"],
    ],
)
def test_node_names_must_all_be_non_empty_strings(names: list[Any]) -> None:
    with pytest.raises(BadRequest) as info:
        parse_extender_args({"Pod": pod(), "Nodes": None, "NodeNames": names})
    assert info.value.message == "NodeNames must be an array of non-empty strings"


def test_node_names_of_a_str_subclass_are_accepted() -> None:
    class Name(str):
        pass

    assert parse_extender_args({"Pod": pod(), "NodeNames": [Name("n1"), "n2"]}).node_names == ["n1", "n2"]


def test_binding_args() -> None:
    args = parse_binding_args({"PodName": "p", "PodNamespace": "ns", "PodUID": "u", "Node": "n1"})
    assert (args.pod_name, args.pod_namespace, args.pod_uid, args.node, args.pod_key) == ("p", "ns", "u", "n1", "ns/p")


@pytest.mark.parametrize("missing", ["PodName", "PodNamespace", "PodUID", "Node"])
def test_binding_args_require_every_field(missing: str) -> None:
    body = {"PodName": "p", "PodNamespace": "ns", "PodUID": "u", "Node": "n1"}
    del body[missing]
    with pytest.raises(BadRequest, match=f"{missing} is required"):
        parse_binding_args(body)
    body[missing] = 5  # type: ignore[assignment]
    with pytest.raises(BadRequest, match=f"{missing} must be a non-empty string"):
        parse_binding_args(body)


def test_names_mode_answer_is_always_a_list() -> None:
    args = parse_extender_args({"Pod": pod(), "NodeNames": ["n1", "n2"]})
    answer = filter_result(args, [], failed={"n1": "cannot allocate all claims"}, unresolvable={"n2": "x"})
    assert answer == {
        "Nodes": None,
        "NodeNames": [],
        "FailedNodes": {"n1": "cannot allocate all claims"},
        "FailedAndUnresolvableNodes": {"n2": "x"},
        "Error": "",
    }


def test_nodes_mode_answer_echoes_the_full_node_objects_that_passed() -> None:
    sent = node_list("n1", "n2", "n3")
    args = parse_extender_args({"Pod": pod(), "Nodes": sent})
    answer = filter_result(args, ["n1", "n3"], failed={"n2": "cannot allocate all claims"}, unresolvable={})
    assert answer["NodeNames"] is None
    assert answer["Nodes"]["kind"] == "NodeList"
    assert answer["Nodes"]["items"] == [sent["items"][0], sent["items"][2]]  # whole objects, same order


def test_a_node_is_never_in_both_failure_maps() -> None:
    args = parse_extender_args({"Pod": pod(), "NodeNames": ["n1"]})
    answer = filter_result(args, [], failed={"n1": "a"}, unresolvable={"n1": "b"})
    assert answer["FailedNodes"] == {}
    assert answer["FailedAndUnresolvableNodes"] == {"n1": "b"}


def test_error_answers() -> None:
    assert error_filter_result(None, "boom")["NodeNames"] == []
    args = parse_extender_args({"Pod": pod(), "Nodes": node_list("n1")})
    answer = error_filter_result(args, "cache not synced yet")
    assert answer["Error"] == "cache not synced yet"
    assert answer["Nodes"]["items"] == []
    assert binding_result() == {"Error": ""}
    assert binding_result("x") == {"Error": "x"}


def test_scores_are_clamped_to_the_extender_range() -> None:
    assert priority_list([("a", 11), ("b", -1), ("c", 7)]) == [
        {"Host": "a", "Score": 10},
        {"Host": "b", "Score": 0},
        {"Host": "c", "Score": 7},
    ]


def test_scores_are_plain_ints_whatever_the_service_returns() -> None:
    answer = priority_list([("a", 0), ("b", 10), ("c", 7.9), ("d", True), ("e", 10.5), ("f", -0.5)])  # type: ignore[list-item]
    assert answer == [
        {"Host": "a", "Score": 0},
        {"Host": "b", "Score": 10},
        {"Host": "c", "Score": 7},
        {"Host": "d", "Score": 1},
        {"Host": "e", "Score": 10},
        {"Host": "f", "Score": 0},
    ]
    assert all(type(entry["Score"]) is int for entry in answer)  # never a bool or a float on the wire


_NAMES = [f"node-{i:04d}.zone-a.example.com" for i in range(40)]


@pytest.mark.parametrize(
    "scores",
    [
        [],
        [("node-1", 7)],
        [(name, i % 11) for i, name in enumerate(_NAMES)],
        [(name, 10 - i % 11) for i, name in enumerate(_NAMES)],  # the best comes first; ties keep the first
        [("a", 0), ("b", 0)],
        [("a", True), ("b", 1.0), ("c", Decimal(4)), ("d", -0.0), ("e", 10.0)],  # equal to an int in range
        [("a", 11), ("b", -1), ("c", 7)],  # clamped
        [("a", 7.9), ("b", 10.5), ("c", -0.5), ("d", False)],  # clamped
        [('quote"d', 3), ("back\\slash", 4), ("tab\tname", 5), ("del\x7f", 1)],  # orjson escapes (or not)
        [("n\u00f6de", 2), ("\u30ce\u30fc\u30c9", 9), ("emoji-\U0001f600", 1), ("a/b", 6), (" ", 0)],
    ],
)
def test_encoded_priority_list_is_exactly_what_orjson_writes(scores: list[tuple[str, Any]]) -> None:
    body, best = encode_priority_list(scores)
    answer = priority_list(scores)
    assert body == orjson.dumps(answer)
    top = max(answer, key=lambda entry: entry["Score"], default=None)
    assert best == (None if top is None else (top["Host"], top["Score"]))
    assert best is None or type(best[1]) is int
    hosts, values = [host for host, _ in scores], [value for _, value in scores]
    assert encode_priority_columns(hosts, values) == (body, best)
    assert encode_priority_columns(tuple(hosts), tuple(values)) == (body, best)


def test_priority_columns_of_different_lengths_are_refused() -> None:
    with pytest.raises(ValueError):
        encode_priority_columns(["a", "b"], [1])
    with pytest.raises(ValueError):
        encode_priority_columns([], [1])


@pytest.mark.parametrize(
    "scores",
    [
        [("a", "7")],  # int("7") would be 7; the dict lookup refuses it and priority_list decides
        [("a", float("nan"))],
        [("a", 1, 2)],
        [(1, 3)],
        [("a", [1])],
    ],
)
def test_encoded_priority_list_fails_as_priority_list_does(scores: list[Any]) -> None:
    try:
        expected: Any = orjson.dumps(priority_list(scores))
    except Exception as exc:
        expected = type(exc)
    try:
        got: Any = encode_priority_list(scores)[0]
    except Exception as exc:
        got = type(exc)
    assert got == expected


def test_valid_node_names_take_the_direct_encoding(monkeypatch: pytest.MonkeyPatch) -> None:
    """The point of ``encode_priority_list``: no dict per node for the answers it usually gives."""
    import extender.server.wire as wire

    def no_dicts(scores: Any) -> Any:
        raise AssertionError("priority_list was used")

    monkeypatch.setattr(wire, "priority_list", no_dicts)
    body, best = encode_priority_list([(name, i % 11) for i, name in enumerate(_NAMES)])
    assert orjson.loads(body)[3] == {"Host": _NAMES[3], "Score": 3} and best == (_NAMES[10], 10)


def test_encoded_answers_are_found_by_the_outcome_object_itself() -> None:
    answers = EncodedAnswers(size=2)
    first, second, third = object(), object(), object()
    answers.put(first, b"1")
    answers.put(second, b"2")
    assert answers.get(first) == b"1" and answers.get(second) == b"2" and answers.get(third) is None
    answers.put(third, b"3")  # the oldest goes
    assert answers.get(first) is None and answers.get(third) == b"3"
