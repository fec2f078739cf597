"""``POST /preempt`` over loopback HTTP, with the real service and the embedded backend (issue 15,
spec/preemption.md §2.1, §2.6): kube-scheduler's in-tree victims per node come back with the device
holders that must also go, nodes where no victims free the devices are dropped, and the protocol's
rules hold (Meta answers, ``Pods[0]`` the most important, a list never shrunk, no empty list, no
victim of equal or higher priority, no pod of another node, no node that was not asked about)."""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient
from structlog.testing import capture_logs

from extender.backends.embedded import EmbeddedBackend
from extender.server import create_app
from extender.state.service import SchedulingService
from tests import manifests as m

Client = TestClient[Any, Any]
MakeClient = Callable[..., Awaitable["Cluster"]]


def prio_pod(name: str, priority: int, *claims: str, **spec: Any) -> dict[str, Any]:
    pod = m.pod(name, *claims)
    pod["spec"]["priority"] = priority
    pod["spec"].update(spec)
    return pod


def meta(*uids: str, pdb: int = 0) -> dict[str, Any]:
    return {"Pods": [{"UID": uid} for uid in uids], "NumPDBViolations": pdb}


class Cluster:
    """Two nodes of two GPUs, all four held by pods of priority 100: ``low-1`` and ``low-2`` on
    node-1, ``low-3`` and ``low-4`` on node-2 (``priorities`` overrides some); ``hog-N`` of priority
    50 runs on node-N with no claim (kube-scheduler's CPU victim). The server in front of it."""

    def __init__(self, *extra: dict[str, Any], priorities: dict[int, int] | None = None, **options: Any) -> None:
        priorities = priorities or {}
        objects = m.cluster(*[m.claim(f"lc{i}") for i in range(1, 5)], *extra)
        objects += [prio_pod(f"low-{i}", priorities.get(i, 100), f"lc{i}") for i in range(1, 5)]
        objects += [prio_pod("hog-1", 50), prio_pod("hog-2", 50)]
        self.backend = EmbeddedBackend(copy.deepcopy(objects))
        self.service = SchedulingService(backend=self.backend, hold_seconds=0, **options)
        self.client: Client | None = None

    async def start(self, aiohttp_client: Callable[..., Awaitable[Client]]) -> Cluster:
        for i, node in zip(range(1, 5), ["node-1", "node-1", "node-2", "node-2"], strict=True):
            await self.service.bind("default", f"low-{i}", f"uid-low-{i}", node)
        for n in (1, 2):
            await self.service.bind("default", f"hog-{n}", f"uid-hog-{n}", f"node-{n}")
        self.client = await aiohttp_client(create_app(self.service))
        return self

    def pod(self, name: str) -> dict[str, Any]:
        raw = self.backend.get("Pod", "default", name)
        assert raw is not None
        return raw

    async def post(self, body: Any, *, status: int = 200) -> Any:
        assert self.client is not None
        data = body if isinstance(body, bytes) else orjson.dumps(body)
        response = await self.client.post("/preempt", data=data, headers={"Content-Type": "application/json"})
        assert response.status == status, await response.text()
        assert response.content_type == "application/json"
        return orjson.loads(await response.read())

    async def preempt(self, pod: str, victims: dict[str, Any], *, full: bool = False) -> Any:
        key = "NodeNameToVictims" if full else "NodeNameToMetaVictims"
        answer = await self.post({"Pod": self.pod(pod), key: victims})
        assert set(answer) == {"NodeNameToMetaVictims"}, answer  # no Error
        result: dict[str, Any] = answer["NodeNameToMetaVictims"]
        for node, entry in result.items():
            assert node in victims, f"{node} was not in the request"
            assert entry["Pods"], f"{node}: an empty victim list (kube-scheduler 1.36 rejects it)"
        return result


@pytest.fixture
def make(aiohttp_client: Callable[..., Awaitable[Client]]) -> MakeClient:
    async def make(*extra: dict[str, Any], **options: Any) -> Cluster:
        return await Cluster(*extra, **options).start(aiohttp_client)

    return make


def high(count: int = 1, priority: int = 1000) -> list[dict[str, Any]]:
    """The preemptor ``high`` and its claim ``hc`` of ``count`` GPUs."""
    return [m.claim("hc", count=count), prio_pod("high", priority, "hc")]


# --- pass-through, additions, omissions ----------------------------------------------------------


async def test_in_tree_victims_that_free_the_devices_pass_through_unchanged(make: MakeClient) -> None:
    c = await make(*high())
    victims = {"node-1": meta("uid-hog-1", "uid-low-1", pdb=2)}
    assert await c.preempt("high", victims) == victims  # order and NumPDBViolations as given


async def test_device_holders_are_added_most_important_first(make: MakeClient) -> None:
    """node-2's in-tree victim holds no device: one of the GPU holders must go too, and it comes
    first (priority 100 before the in-tree victim's 50). Sparing it is not possible; sparing the
    other one is (one GPU suffices), so only one is added."""
    c = await make(*high())
    answer = await c.preempt("high", {"node-2": meta("uid-hog-2", pdb=1)})
    [added, in_tree] = answer["node-2"]["Pods"]
    assert in_tree == {"UID": "uid-hog-2"} and added["UID"] in {"uid-low-3", "uid-low-4"}
    assert answer["node-2"]["NumPDBViolations"] == 1  # kube-scheduler's count, kept


async def test_victims_are_sorted_by_priority_then_the_earlier_start(make: MakeClient) -> None:
    """Two GPUs needed on node-2: both holders go, the priority-300 one first, then the 200 one,
    then the in-tree victim of 50."""
    c = await make(*high(count=2), priorities={3: 200, 4: 300})
    answer = await c.preempt("high", {"node-2": meta("uid-hog-2")})
    assert [p["UID"] for p in answer["node-2"]["Pods"]] == ["uid-low-4", "uid-low-3", "uid-hog-2"]


async def test_a_node_where_no_set_of_victims_frees_the_devices_is_omitted(make: MakeClient) -> None:
    c = await make(*high(count=3))  # no node has three GPUs
    assert await c.preempt("high", {"node-1": meta("uid-hog-1"), "node-2": meta("uid-hog-2")}) == {}


async def test_only_the_nodes_that_can_be_helped_come_back(make: MakeClient) -> None:
    """node-1's GPUs are held by pods of higher priority than the preemptor: node-1 goes; node-2's
    by pods of lower priority: node-2 stays, with one of them added."""
    c = await make(*high(priority=150), priorities={1: 500, 2: 500})
    answer = await c.preempt("high", {"node-1": meta("uid-hog-1"), "node-2": meta("uid-hog-2")})
    assert set(answer) == {"node-2"} and len(answer["node-2"]["Pods"]) == 2


# --- placeholders (k/k #135486: empty in-tree lists) ---------------------------------------------


async def test_a_placeholder_gets_the_device_holders_that_must_go(make: MakeClient) -> None:
    c = await make(*high())
    answer = await c.preempt("high", {"node-1": meta()})
    [victim] = answer["node-1"]["Pods"]
    assert victim["UID"] in {"uid-low-1", "uid-low-2"}


async def test_a_placeholder_whose_devices_fit_already_is_omitted(make: MakeClient) -> None:
    """node-3 has two free GPUs: nothing needs to go there, the pod fits next cycle."""
    c = await make(*high(), m.node("node-3"), m.gpu_slice("node-3", 2))
    answer = await c.preempt("high", {"node-3": meta(), "node-1": meta()})
    assert set(answer) == {"node-1"}


async def test_a_terminating_holder_frees_its_device_without_being_named(make: MakeClient) -> None:
    """low-1 is being deleted already (a finalizer keeps it): its GPU counts as freed, so the
    placeholder on node-1 needs no victim (omitted), and node-1's in-tree list passes through."""
    c = await make(*high())
    low = c.pod("low-1")
    low["metadata"]["finalizers"] = ["example.com/keep"]
    low["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    c.backend.apply(low)
    assert c.backend.get("ResourceClaim", "default", "lc1")["status"]["allocation"]  # type: ignore[index]
    assert await c.preempt("high", {"node-1": meta()}) == {}
    assert await c.preempt("high", {"node-1": meta("uid-hog-1")}) == {"node-1": meta("uid-hog-1")}


# --- what the victims are ------------------------------------------------------------------------


async def test_unknown_uids_are_kept_and_free_nothing(make: MakeClient) -> None:
    """A UID the store does not know on node-1 (one of another node's pods, one of nobody) is an
    opaque victim: it stays in the list, a GPU holder is added beside it."""
    c = await make(*high())
    answer = await c.preempt("high", {"node-1": meta("uid-low-3", "uid-nobody")})
    uids = [p["UID"] for p in answer["node-1"]["Pods"]]
    assert {"uid-low-3", "uid-nobody"} <= set(uids) and len(uids) == 3
    assert set(uids) - {"uid-low-3", "uid-nobody"} <= {"uid-low-1", "uid-low-2"}


async def test_never_a_victim_of_equal_or_higher_priority(make: MakeClient) -> None:
    """low-3 has the preemptor's priority and low-4 a higher one: one GPU needed on node-2 comes
    from nobody there (omitted); on node-1 from low-1 or low-2. A preemptor of the holders' own
    priority gets no node at all."""
    c = await make(*high(), priorities={3: 1000, 4: 2000})
    answer = await c.preempt("high", {"node-1": meta("uid-hog-1"), "node-2": meta("uid-hog-2")})
    assert set(answer) == {"node-1"}
    c.backend.apply(m.claim("sc"))
    c.backend.apply(prio_pod("same", 100, "sc"))
    assert await c.preempt("same", {"node-1": meta("uid-hog-1"), "node-2": meta()}) == {}


async def test_an_in_tree_victim_of_equal_or_higher_priority_drops_the_node(make: MakeClient) -> None:
    """The list may not shrink and may not name such a victim: the node is omitted."""
    c = await make(*high(priority=80))  # below the low pods, above the hogs
    victims = {"node-1": {"Pods": [c.pod("hog-1"), c.pod("low-1")]}, "node-2": {"Pods": [c.pod("hog-2")]}}
    assert await c.preempt("high", victims, full=True) == {}


async def test_full_pod_arguments_are_answered_with_uids(make: MakeClient) -> None:
    """nodeCacheCapable false: whole pods in, Meta victims out."""
    c = await make(*high())
    victims = {"node-1": {"Pods": [c.pod("low-1")], "NumPDBViolations": 1}, "node-2": {"Pods": [c.pod("hog-2")]}}
    answer = await c.preempt("high", victims, full=True)
    assert answer["node-1"] == meta("uid-low-1", pdb=1)
    assert [p["UID"] for p in answer["node-2"]["Pods"]][1:] == ["uid-hog-2"] and answer["node-2"][
        "NumPDBViolations"
    ] == 0


async def test_a_pod_with_no_claims_gets_the_request_back(make: MakeClient) -> None:
    c = await make(prio_pod("web", 1000))
    victims = {"node-1": meta("uid-hog-1", pdb=3), "node-9": meta("uid-anything")}
    assert await c.preempt("web", victims) == victims
    full = {"node-1": {"Pods": [c.pod("hog-1")], "NumPDBViolations": 0}}
    assert await c.preempt("web", full, full=True) == {"node-1": meta("uid-hog-1")}


# --- failures ------------------------------------------------------------------------------------


async def test_a_pod_whose_claims_cannot_be_read_gets_no_node_and_an_error(make: MakeClient) -> None:
    c = await make(prio_pod("lost", 1000, "no-such-claim"))
    answer = await c.post({"Pod": c.pod("lost"), "NodeNameToMetaVictims": {"node-1": meta("uid-hog-1")}})
    assert answer["NodeNameToMetaVictims"] == {} and "not found" in answer["Error"]


async def test_out_of_time_omits_the_nodes_left_and_says_so(make: MakeClient) -> None:
    c = await make(*high(), preempt_timeout_seconds=0)
    with capture_logs() as logs:
        assert await c.preempt("high", {"node-1": meta("uid-low-1"), "node-2": meta()}) == {}
    [event] = [e for e in logs if e["event"] == "preempt.truncated"]
    assert (event["omitted"], event["nodes"]) == (2, 2)


async def test_a_crash_answers_no_node_with_an_error(make: MakeClient, monkeypatch: pytest.MonkeyPatch) -> None:
    c = await make(*high())

    async def crash(*_args: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(c.service, "preempt", crash)
    answer = await c.post({"Pod": c.pod("high"), "NodeNameToMetaVictims": {"node-1": meta("uid-low-1")}})
    assert answer["NodeNameToMetaVictims"] == {} and "RuntimeError" in answer["Error"]


POD = {"metadata": {"name": "high", "namespace": "default", "uid": "uid-high"}}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "not valid JSON"),
        ({"NodeNameToMetaVictims": {}}, "Pod is required"),
        ({"Pod": POD}, "one of NodeNameToVictims or NodeNameToMetaVictims is required"),
        ({"Pod": POD, "NodeNameToMetaVictims": []}, "NodeNameToMetaVictims must be a JSON object"),
        ({"Pod": POD, "NodeNameToMetaVictims": {"node-1": None}}, "NodeNameToMetaVictims['node-1'] must be a JSON"),
        ({"Pod": POD, "NodeNameToMetaVictims": {"node-1": {"Pods": {}}}}, "Pods must be an array"),
        ({"Pod": POD, "NodeNameToMetaVictims": {"node-1": {"Pods": [{"uid": "x"}]}}}, "Pods[0].UID must be"),
        ({"Pod": POD, "NodeNameToMetaVictims": {"node-1": {"Pods": [], "NumPDBViolations": -1}}}, "non-negative"),
        ({"Pod": POD, "NodeNameToMetaVictims": {"node-1": {"Pods": [], "NumPDBViolations": "1"}}}, "non-negative"),
        ({"Pod": POD, "NodeNameToVictims": {"node-1": {"Pods": [{"metadata": {}}]}}}, "metadata.uid must be"),
        ({"Pod": POD, "NodeNameToMetaVictims": {"": meta()}}, "empty node name"),
        ({"Pod": {"metadata": {}}, "NodeNameToMetaVictims": {}}, "Pod.metadata.name"),
    ],
)
async def test_malformed_requests_are_refused(make: MakeClient, body: Any, message: str) -> None:
    c = await make()
    answer = await c.post(body, status=400)
    assert message in answer["error"], answer


async def test_node_outcomes_are_counted(make: MakeClient) -> None:
    c = await make(*high())
    await c.preempt("high", {"node-1": meta("uid-low-1"), "node-2": meta("uid-hog-2")})
    assert c.client is not None
    text = await (await c.client.get("/metrics")).text()
    for outcome, count in [("passed_through", 1), ("added", 1), ("no_victims_help", 0)]:
        assert f'dra_extender_preempt_verb_nodes_total{{outcome="{outcome}"}} {count}.0' in text
    assert 'dra_extender_request_duration_seconds_count{verb="preempt"} 1.0' in text


async def test_with_device_preemption_off_no_victim_is_added(make: MakeClient) -> None:
    """--no-device-preemption: nobody goes for devices. node-1's in-tree victims free a GPU (passed
    through); node-2's do not, and no holder is added there (left out)."""
    c = await make(*high(), preemption=False)
    answer = await c.preempt("high", {"node-1": meta("uid-low-1"), "node-2": meta("uid-hog-2"), "node-3": meta()})
    assert answer == {"node-1": meta("uid-low-1")}


async def test_the_answered_plan_is_held_once_kube_scheduler_nominates_the_pod(make: MakeClient) -> None:
    """After the verb, kube-scheduler deletes the victims and sets nominatedNodeName: from then on
    the freed GPU is held for the preemptor against pods of lower priority (spec §2.7.2)."""
    c = await make(*high(), m.claim("tc"), prio_pod("third", 100, "tc"))
    answer = await c.preempt("high", {"node-2": meta("uid-hog-2")})
    [added, _] = answer["node-2"]["Pods"]
    assert c.service.cluster.nominations.pending  # a plan, not held yet
    victim = next(p for p in c.backend.list_objects("Pod") if p["metadata"]["uid"] == added["UID"])
    c.backend.delete_pod("default", victim["metadata"]["name"])  # kube-scheduler's DELETE
    c.backend.delete_pod("default", "hog-2")
    await c.backend.set_nominated_node("default", "high", "uid-high", "node-2")
    third = await c.service.filter_and_recover(c.pod("third"), ["node-2"])
    assert third.node_names == [] and "nominated for preemptor default/high" in third.failed["node-2"]
    assert "uid-high" in c.service.cluster.nominations.by_uid and not c.service.cluster.nominations.pending
    assert (await c.service.filter_and_recover(c.pod("high"), ["node-2"])).node_names == ["node-2"]


async def test_added_victims_spare_budget_protected_pods_and_are_counted(make: MakeClient) -> None:
    """low-3's PodDisruptionBudget allows no disruption: the verb adds low-4 instead (without the
    budget low-3 would go: low-4 has the higher priority); when both are needed, the violation is
    counted in NumPDBViolations."""
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep-low-3", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "low-3"}}, "maxUnavailable": 0},
        "status": {"disruptionsAllowed": 0},
    }
    c = await make(*high(), pdb, priorities={4: 200})
    low3 = c.pod("low-3")
    low3["metadata"]["labels"] = {"app": "low-3"}
    low3["metadata"].pop("resourceVersion", None)
    c.backend.apply(low3)
    answer = await c.preempt("high", {"node-2": meta("uid-hog-2")})
    assert [p["UID"] for p in answer["node-2"]["Pods"]] == ["uid-low-4", "uid-hog-2"]
    assert answer["node-2"]["NumPDBViolations"] == 0
    c2 = await make(*high(count=2), pdb)
    low3 = c2.pod("low-3")
    low3["metadata"]["labels"] = {"app": "low-3"}
    low3["metadata"].pop("resourceVersion", None)
    c2.backend.apply(low3)
    answer = await c2.preempt("high", {"node-2": meta("uid-hog-2")})
    assert answer["node-2"]["NumPDBViolations"] == 1
