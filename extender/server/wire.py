"""The kube-scheduler extender wire format, exactly (upstream:
``staging/src/k8s.io/kube-scheduler/extender/v1/types.go``).

Requests are read key by key with PascalCase names (``Pod``, ``Nodes``, ``NodeNames``, ``PodName``,
...) and turned into small typed values; anything malformed raises ``BadRequest`` naming the
problem, before anything changes. Answers are built as plain dicts for ``orjson``:

- ``ExtenderFilterResult`` ``{Nodes, NodeNames, FailedNodes, FailedAndUnresolvableNodes, Error}``:
  in nodeCacheCapable mode (``NodeNames`` sent) ``NodeNames`` is always a list, even empty, because
  the scheduler reads a null list as "drop every node"; otherwise ``Nodes`` echoes the NodeList with
  the full Node objects that passed.
- ``HostPriorityList`` ``[{"Host", "Score"}]`` (``encode_priority_columns`` writes its JSON directly
  from the service's columns of hosts and scores, ``encode_priority_list`` from pairs: one dict per
  node is most of what prioritize costs the server); ``ExtenderBindingResult`` ``{Error}``;
- ``ExtenderPreemptionResult`` ``{NodeNameToMetaVictims: {node: {Pods: [{UID}], NumPDBViolations}}}``,
  always the Meta form (the scheduler maps UIDs back to the pods on each node). Upstream's type has
  no ``Error``: a failure adds one for people and logs, beside an empty map, which kube-scheduler
  reads as "no preemption" (it never reads ``Error`` there).

``wire_field`` is the one place that decides which field an ``ExtenderError`` lands in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from operator import itemgetter
from typing import Any

import orjson

from extender.core.errors import DoesNotFit, ExtenderError, NodeUnresolvable
from extender.state.cache.fit_cache import CURRENT_CANDIDATE_LISTS
from extender.state.preemption.verb import NodeVictims

__all__ = [
    "BadRequest",
    "BindingArgs",
    "EncodedAnswers",
    "ExtenderArgs",
    "PreemptionArgs",
    "WireField",
    "binding_result",
    "encode_priority_columns",
    "encode_priority_list",
    "error_filter_result",
    "error_text",
    "filter_result",
    "parse_binding_args",
    "parse_extender_args",
    "parse_preemption_args",
    "preemption_result",
    "priority_list",
    "wire_field",
]


class BadRequest(Exception):
    """A request the server cannot read; HTTP 400 with ``{"error": message}``. Server-only."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class WireField(Enum):
    FAILED_NODES = "FailedNodes"
    FAILED_AND_UNRESOLVABLE_NODES = "FailedAndUnresolvableNodes"
    ERROR = "Error"


def wire_field(exc: BaseException) -> WireField:
    """Where an error goes in a filter answer. Order matters: NodeUnresolvable is a DoesNotFit.

    Only "does not fit" is about one node; everything else (PodUnschedulable, Transient, a missing
    or invalid object, a bug) is the whole request's ``Error``, so the scheduler backs off and retries.
    """
    if isinstance(exc, NodeUnresolvable):
        return WireField.FAILED_AND_UNRESOLVABLE_NODES
    if isinstance(exc, DoesNotFit):
        return WireField.FAILED_NODES
    return WireField.ERROR


# --- requests ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ExtenderArgs:
    """A filter / prioritize / explain request."""

    pod: dict[str, Any]
    node_names: list[str]
    """The candidate nodes in request order, from ``NodeNames`` or from ``Nodes.items``."""
    node_list: dict[str, Any] | None = None
    """The ``Nodes`` NodeList as sent (nodeCacheCapable false), else None."""
    names_given: bool = True
    """``NodeNames`` was a list: answer with ``NodeNames``."""

    @property
    def pod_key(self) -> str:
        meta = self.pod["metadata"]
        return f"{meta.get('namespace') or 'default'}/{meta['name']}"

    @property
    def nodes(self) -> list[dict[str, Any]]:
        """The full Node objects (empty in nodeCacheCapable mode)."""
        if self.node_list is None:
            return []
        items: list[dict[str, Any]] = self.node_list.get("items") or []
        return items


@dataclass(frozen=True, slots=True, kw_only=True)
class BindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str

    @property
    def pod_key(self) -> str:
        return f"{self.pod_namespace}/{self.pod_name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class PreemptionArgs:
    """An ExtenderPreemptionArgs: the pod and its victims per node, in request order."""

    pod: dict[str, Any]
    victims: dict[str, NodeVictims]
    #: ``NodeNameToMetaVictims`` (UIDs only, nodeCacheCapable true) rather than full pods.
    meta: bool = True

    @property
    def pod_key(self) -> str:
        meta = self.pod["metadata"]
        return f"{meta.get('namespace') or 'default'}/{meta['name']}"


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadRequest(f"{what} must be a JSON object, not {_json_type(value)}")
    return value


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _name(meta: Mapping[str, Any], what: str) -> str:
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise BadRequest(f"{what}.metadata.name must be a non-empty string")
    return name


def _check_pod(raw: Any) -> dict[str, Any]:
    """The fields of the pod the verbs read; the rest is passed through untouched."""
    pod = _object(raw, "Pod")
    meta = _object(pod.get("metadata"), "Pod.metadata")
    _name(meta, "Pod")
    for key in ("namespace", "uid"):
        if meta.get(key) is not None and not isinstance(meta[key], str):
            raise BadRequest(f"Pod.metadata.{key} must be a string")
    spec = pod.get("spec")
    if spec is not None:
        spec = _object(spec, "Pod.spec")
        claims = spec.get("resourceClaims")
        if claims is not None:
            _list_of_named_objects(claims, "Pod.spec.resourceClaims")
    status = pod.get("status")
    if status is not None:
        status = _object(status, "Pod.status")
        statuses = status.get("resourceClaimStatuses")
        if statuses is not None:
            _list_of_named_objects(statuses, "Pod.status.resourceClaimStatuses")
    return pod


def _list_of_named_objects(value: Any, what: str) -> None:
    if not isinstance(value, list):
        raise BadRequest(f"{what} must be an array, not {_json_type(value)}")
    for i, item in enumerate(value):
        entry = _object(item, f"{what}[{i}]")
        if not isinstance(entry.get("name"), str) or not entry["name"]:
            raise BadRequest(f"{what}[{i}].name must be a non-empty string")


def _check_node(raw: Any, index: int) -> str:
    what = f"Nodes.items[{index}]"
    node = _object(raw, what)
    meta = _object(node.get("metadata"), f"{what}.metadata")
    name = _name(meta, what)
    labels = meta.get("labels")
    if labels is not None:
        labels = _object(labels, f"{what}.metadata.labels")
        if not all(isinstance(v, str) for v in labels.values()):
            raise BadRequest(f"{what}.metadata.labels values must be strings")
    return name


def _non_empty_strings(values: list[Any]) -> bool:
    """``all(isinstance(v, str) and v for v in values)`` without a bytecode step per item, since
    NodeNames carries every node of the cluster: ``str.join`` accepts only strings (subclasses too),
    then ``all`` rejects the empty ones; both loops run in C."""
    try:
        "".join(values)
    except TypeError:
        return False
    return all(values)


def parse_extender_args(body: Any) -> ExtenderArgs:
    """ExtenderArgs: ``Pod`` required; ``Nodes`` (a NodeList) or ``NodeNames`` (strings) required.

    Upstream sends exactly one of the two. If both come, ``Nodes`` decides the candidates and the
    answer carries both fields.
    """
    args = _object(body, "request body")
    if "Pod" not in args or args["Pod"] is None:
        raise BadRequest("Pod is required")
    pod = _check_pod(args["Pod"])
    raw_names = args.get("NodeNames")
    raw_list = args.get("Nodes")
    if raw_names is None and raw_list is None:
        raise BadRequest("one of Nodes or NodeNames is required")
    names: list[str] | None = None
    if raw_names is not None:
        if not isinstance(raw_names, list) or not _non_empty_strings(raw_names):
            raise BadRequest("NodeNames must be an array of non-empty strings")
        names = raw_names  # the request's own freshly parsed list: no copy
    if raw_list is None:
        assert names is not None
        return ExtenderArgs(pod=pod, node_names=names)
    node_list = _object(raw_list, "Nodes")
    items = node_list.get("items")
    if items is None:
        items = []  # Go encodes an empty NodeList's items as null
    if not isinstance(items, list):
        raise BadRequest(f"Nodes.items must be an array, not {_json_type(items)}")
    listed = [_check_node(item, i) for i, item in enumerate(items)]
    return ExtenderArgs(pod=pod, node_names=listed, node_list=node_list, names_given=names is not None)


def parse_binding_args(body: Any) -> BindingArgs:
    """ExtenderBindingArgs: all four fields are required non-empty strings."""
    args = _object(body, "request body")
    values: dict[str, str] = {}
    fields = (("PodName", "pod_name"), ("PodNamespace", "pod_namespace"), ("PodUID", "pod_uid"), ("Node", "node"))
    for key, field_name in fields:
        value = args.get(key)
        if value is None:
            raise BadRequest(f"{key} is required")
        if not isinstance(value, str) or not value:
            raise BadRequest(f"{key} must be a non-empty string")
        values[field_name] = value
    return BindingArgs(**values)


def parse_preemption_args(body: Any) -> PreemptionArgs:
    """ExtenderPreemptionArgs: ``Pod`` required; ``NodeNameToVictims`` (full pods, nodeCacheCapable
    false) or ``NodeNameToMetaVictims`` (``{"UID": ...}``, nodeCacheCapable true) required, a map of
    node name to ``{"Pods": [...], "NumPDBViolations": n}`` (``Pods`` null: none, as Go encodes an
    empty list). Upstream sends one of the two; if both come, ``NodeNameToVictims`` decides."""
    args = _object(body, "request body")
    if "Pod" not in args or args["Pod"] is None:
        raise BadRequest("Pod is required")
    pod = _check_pod(args["Pod"])
    full, meta = args.get("NodeNameToVictims"), args.get("NodeNameToMetaVictims")
    if full is None and meta is None:
        raise BadRequest("one of NodeNameToVictims or NodeNameToMetaVictims is required")
    key = "NodeNameToVictims" if full is not None else "NodeNameToMetaVictims"
    nodes = _object(full if full is not None else meta, key)
    victims: dict[str, NodeVictims] = {}
    for node, raw in nodes.items():
        if not node:
            raise BadRequest(f"{key} has an empty node name")
        victims[node] = _node_victims(raw, f"{key}[{node!r}]", full=full is not None)
    return PreemptionArgs(pod=pod, victims=victims, meta=full is None)


def _node_victims(raw: Any, what: str, *, full: bool) -> NodeVictims:
    entry = _object(raw, what)
    pods = entry.get("Pods")
    if pods is None:
        pods = []
    if not isinstance(pods, list):
        raise BadRequest(f"{what}.Pods must be an array, not {_json_type(pods)}")
    count = entry.get("NumPDBViolations", 0)
    if count is None:
        count = 0
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise BadRequest(f"{what}.NumPDBViolations must be a non-negative integer")
    uids: list[str] = []
    for i, item in enumerate(pods):
        victim = _object(item, f"{what}.Pods[{i}]")
        if full:
            uid = _object(victim.get("metadata"), f"{what}.Pods[{i}].metadata").get("uid")
            if not isinstance(uid, str) or not uid:
                raise BadRequest(f"{what}.Pods[{i}].metadata.uid must be a non-empty string")
        else:
            uid = victim.get("UID")
            if not isinstance(uid, str) or not uid:
                raise BadRequest(f"{what}.Pods[{i}].UID must be a non-empty string")
        uids.append(uid)
    return NodeVictims(tuple(uids), count, tuple(pods) if full else None)


# --- answers ----------------------------------------------------------------------------------


def filter_result(
    args: ExtenderArgs,
    passed: Sequence[str],
    *,
    failed: Mapping[str, str],
    unresolvable: Mapping[str, str],
    error: str = "",
) -> dict[str, Any]:
    """ExtenderFilterResult for the nodes that passed, in the mode the request used."""
    result: dict[str, Any] = {
        "Nodes": None,
        "NodeNames": None,
        "FailedNodes": dict(failed),
        # the scheduler lets this map win over FailedNodes; keep a node in only one of them
        "FailedAndUnresolvableNodes": dict(unresolvable),
        "Error": error,
    }
    for node in unresolvable:
        result["FailedNodes"].pop(node, None)
    if args.node_list is not None:
        keep = set(passed)
        items = [item for item in args.nodes if item["metadata"]["name"] in keep]
        result["Nodes"] = {**args.node_list, "items": items}
    if args.names_given:
        result["NodeNames"] = list(passed)
    return result


class EncodedAnswers:
    """Encoded filter answers by the outcome they were written from, for the most recent (one per
    candidate list kube-scheduler has current: ``CURRENT_CANDIDATE_LISTS``).

    The service hands out the same outcome object to the next pod of a shape while no node started
    or stopped failing (``SchedulingService.filter``); its JSON is then the same bytes, for requests
    in the same mode (``NodeNames``, no ``Nodes``). Entries hold their outcome, so an id is never
    reused while it is remembered."""

    __slots__ = ("_entries", "size")

    def __init__(self, size: int = CURRENT_CANDIDATE_LISTS) -> None:
        self.size = size
        self._entries: dict[int, tuple[object, bytes]] = {}

    def get(self, outcome: object) -> bytes | None:
        entry = self._entries.get(id(outcome))
        return entry[1] if entry is not None and entry[0] is outcome else None

    def put(self, outcome: object, body: bytes) -> None:
        entries = self._entries
        if len(entries) >= self.size:
            del entries[next(iter(entries))]  # the oldest
        entries[id(outcome)] = (outcome, body)


def error_filter_result(args: ExtenderArgs | None, error: str) -> dict[str, Any]:
    """A filter answer that rejects the whole request with ``Error`` (no node passes)."""
    if args is None:  # the request could not even be read into ExtenderArgs
        return {"Nodes": None, "NodeNames": [], "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": error}
    return filter_result(args, [], failed={}, unresolvable={}, error=error)


def priority_list(scores: Iterable[tuple[str, int]]) -> list[dict[str, Any]]:
    """HostPriorityList; scores are clamped to 0..10 because the scheduler does not clamp them.
    A score that already is an int in range (the usual case) is taken as is: this runs per node."""
    return [
        {"Host": node, "Score": score if type(score) is int and 0 <= score <= 10 else _clamp(score)}
        for node, score in scores
    ]


def _clamp(score: Any) -> int:
    return max(0, min(10, int(score)))


_SCORE = itemgetter("Score")
#: What follows a host name in the JSON of a HostPriorityList: its score, then the next entry's
#: opening or the end of the list. Keyed by score: a lookup is also the range check.
_SCORE_THEN_NEXT = {score: f'","Score":{score}}},{{"Host":"' for score in range(11)}
_SCORE_THEN_END = {score: f'","Score":{score}}}]' for score in range(11)}


def encode_priority_list(scores: Sequence[tuple[str, Any]]) -> tuple[bytes, tuple[str, int] | None]:
    """``orjson.dumps(priority_list(scores))``, and the first best ``(host, score)`` (None if empty);
    see ``encode_priority_columns``."""
    if scores:
        try:
            hosts, values = zip(*scores, strict=True)
        except (TypeError, ValueError):
            pass  # not pairs: priority_list answers, or raises, as it always did
        else:
            return encode_priority_columns(hosts, values)
    return _encode_pairs(scores)


def encode_priority_columns(hosts: Sequence[str], scores: Sequence[Any]) -> tuple[bytes, tuple[str, int] | None]:
    """``encode_priority_list(list(zip(hosts, scores)))``, from the two columns the service gives.

    The usual answer is written as text by C-level joins, without a dict or a pair per node: host
    names that orjson writes verbatim (printable ASCII without ``"`` or ``\\``, as every valid node
    name) and scores equal to an int in 0..10 (which ``_clamp`` leaves as they are). The bytes are
    exactly orjson's; anything else takes the ``priority_list`` way, errors included. ValueError
    if the columns differ in length."""
    if hosts and len(hosts) == len(scores):
        try:
            joined = "".join(hosts)
            if joined.isascii() and joined.isprintable() and '"' not in joined and "\\" not in joined:
                pieces = [""] * (2 * len(hosts))
                pieces[::2] = hosts
                pieces[1::2] = map(_SCORE_THEN_NEXT.__getitem__, scores)
                pieces[-1] = _SCORE_THEN_END[scores[-1]]
                top = max(scores)
                return ('[{"Host":"' + "".join(pieces)).encode(), (hosts[scores.index(top)], int(top))
        except (TypeError, ValueError, KeyError):
            pass  # the general way below answers, or raises, as it always did
    return _encode_pairs(list(zip(hosts, scores, strict=True)))


def _encode_pairs(scores: Sequence[tuple[str, Any]]) -> tuple[bytes, tuple[str, int] | None]:
    answer = priority_list(scores)
    best = max(answer, key=_SCORE, default=None)
    return orjson.dumps(answer), None if best is None else (best["Host"], best["Score"])


def preemption_result(victims: Mapping[str, NodeVictims], error: str = "") -> dict[str, Any]:
    """ExtenderPreemptionResult, in the Meta form; ``Error`` only when there is one."""
    result: dict[str, Any] = {
        "NodeNameToMetaVictims": {
            node: {"Pods": [{"UID": uid} for uid in entry.uids], "NumPDBViolations": entry.pdb_violations}
            for node, entry in victims.items()
        }
    }
    if error:
        result["Error"] = error
    return result


def binding_result(error: str = "") -> dict[str, str]:
    return {"Error": error}


def error_text(exc: BaseException) -> str:
    """The text for ``Error``: an ExtenderError's reason, else a generic internal-error message
    (no internals on the wire; the traceback goes to the log)."""
    if isinstance(exc, ExtenderError):
        return exc.reason
    return f"internal error in dra-extender ({type(exc).__name__}); see the extender log"
