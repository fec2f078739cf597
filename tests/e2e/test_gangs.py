"""Gangs on the real control plane: kube-scheduler v1.36.3 with ``GenericWorkload`` and
``GangScheduling`` on, ``scheduling.k8s.io/v1alpha2`` served, and the extender as the device
allocator (spec/workloads-and-gangs.md §8).

A control plane of its own (the gates must be on for every component), with deploy/base's RBAC
and one replica; the in-tree reference is a second kube-scheduler with the same gates and the
DynamicResources plugin. Every wait is a bound against a hang, never a measure.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.controlplane.api import ApiError, eventually
from tests.controlplane.assets import assets_or_skip
from tests.controlplane.cluster import FEATURE_GATES, RUNTIME_CONFIG, ControlPlane, Options
from tests.e2e.harness import IN_TREE, SCHEDULER_NAME, Deployment, Scenario
from tests.e2e.kubelet import HIGH, LOW, TOP, kubelet_done, priority_classes, running_holder, terminating

GANG_GATES = (
    "GenericWorkload=true,GangScheduling=true,DRAWorkloadResourceClaims=true,TopologyAwareWorkloadScheduling=true"
)
PODGROUPS = "scheduling.k8s.io/v1alpha2"
IN_TREE_GANGS = "kube-scheduler-in-tree-gangs"


@pytest.fixture(scope="module")
def gang_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    options = Options(
        feature_gates=f"{FEATURE_GATES},{GANG_GATES}", runtime_config=f"{RUNTIME_CONFIG},{PODGROUPS}=true"
    )
    plane = ControlPlane(assets_or_skip("gang tier"), tmp_path_factory.mktemp("gang-plane"), options)
    with plane:
        yield plane


@pytest.fixture(scope="module")
def gang_deployment(gang_plane: ControlPlane) -> Iterator[Deployment]:
    deployment = Deployment(gang_plane)
    try:
        deployment.start_pair(scheduler_args=[f"--feature-gates={GANG_GATES}"])
        yield deployment
    finally:
        deployment.stop()


@pytest.fixture(scope="module")
def in_tree_gangs(gang_deployment: Deployment) -> Iterator[str]:
    configuration = {"leaderElection": {"leaderElect": False}, "profiles": [{"schedulerName": IN_TREE}]}
    gang_deployment.plane.start_scheduler(
        configuration, name=IN_TREE_GANGS, extra_args=[f"--feature-gates={GANG_GATES}"]
    )
    try:
        yield IN_TREE
    finally:
        gang_deployment.plane.stop_scheduler(IN_TREE_GANGS)


@pytest.fixture
def gangs(gang_deployment: Deployment) -> Iterator[Scenario]:
    made = Scenario(gang_deployment)
    try:
        yield made
    finally:
        made.cleanup()


def pod_group(scenario: Scenario, name: str, min_count: int) -> None:
    scenario.create(
        {
            "apiVersion": PODGROUPS,
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": scenario.namespace},
            "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
        }
    )


def member(
    scenario: Scenario,
    name: str,
    group: str,
    *,
    claim: str = "",
    template: str = "",
    scheduler_name: str = SCHEDULER_NAME,
    priority: str = "",
) -> None:
    ref = {"name": "gpus", **({"resourceClaimName": claim} if claim else {"resourceClaimTemplateName": template})}
    spec: dict[str, Any] = {
        "schedulerName": scheduler_name,
        "schedulingGroup": {"podGroupName": group},
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {"claims": [{"name": "gpus"}]}}
        ],
        "resourceClaims": [ref],
    }
    if priority:
        spec["priorityClassName"] = priority
    scenario.create(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": scenario.namespace}, "spec": spec}
    )


def group_condition(scenario: Scenario, name: str) -> dict[str, Any] | None:
    group = scenario.admin.get(f"/apis/{PODGROUPS}/namespaces/{scenario.namespace}/podgroups/{name}")
    for condition in (group.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodGroupScheduled":
            return dict(condition)
    return None


def allocated_on(scenario: Scenario, pod_name: str) -> tuple[str, list[str]]:
    """The pod's node and the devices of its claim, which must be allocated there and reserved for it."""
    pod = scenario.get_pod(pod_name)
    node = pod["spec"]["nodeName"]
    (ref,) = pod["spec"]["resourceClaims"]
    name = ref.get("resourceClaimName")
    if name is None:  # a template claim: the name the resourceclaim controller recorded
        (status,) = pod["status"]["resourceClaimStatuses"]
        name = status["resourceClaimName"]
    claim = scenario.get_claim(name)
    allocation = claim["status"]["allocation"]
    assert [r["name"] for r in claim["status"]["reservedFor"]] == [pod_name]
    results = allocation["devices"]["results"]
    assert {r["pool"] for r in results} == {node}, (pod_name, node, results)
    return node, [f"{r['pool']}/{r['device']}" for r in results]


def test_a_gang_that_fits_is_placed_whole_with_its_devices_on_each_members_node(gangs: Scenario) -> None:
    nodes = gangs.nodes(3)
    for name in nodes:
        gangs.gpus(name, 2)
    gpu = gangs.device_class()
    gangs.template("two-gpus", gpu, count=2)
    pod_group(gangs, "trainers", 3)
    for i in range(3):
        member(gangs, f"w{i}", "trainers", template="two-gpus")
    placed = {f"w{i}": gangs.bound(f"w{i}") for i in range(3)}
    assert sorted(placed.values()) == sorted(nodes)
    devices = [d for i in range(3) for d in eventually(lambda i=i: allocated_on(gangs, f"w{i}"), what="claims")[1]]
    assert len(devices) == len(set(devices)) == 6


def test_kubernetes_138765_the_extender_places_a_gang_that_member_by_member_choices_cannot(
    gangs: Scenario, in_tree_gangs: str
) -> None:
    """Spec E3b: one node with an h100 and an a100; *a* (higher priority: kube-scheduler tries it
    first) takes any GPU, *b* only the h100. The in-tree plugin gives *a* the h100 and the gang
    never fits; the extender's joint plan gives *a* the a100."""
    (node,) = gangs.nodes(1)
    devices = [{"name": "h100", "attributes": {"model": {"string": "h100"}}},
               {"name": "a100", "attributes": {"model": {"string": "a100"}}}]  # fmt: skip
    gangs.slice(node, devices)
    any_gpu = gangs.device_class("any")
    h100 = gangs.device_class("h100", cel=f'device.attributes["{gangs.driver}"].model == "h100"')
    first = f"{gangs.prefix}-first"
    gangs.create({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": first},
                  "value": 1000})  # fmt: skip
    for label, scheduler in (("ext", SCHEDULER_NAME), ("ref", in_tree_gangs)):
        gangs.claim(f"{label}-a", any_gpu)
        gangs.claim(f"{label}-b", h100)
        pod_group(gangs, label, 2)
        member(gangs, f"{label}-a", label, claim=f"{label}-a", scheduler_name=scheduler, priority=first)
        member(gangs, f"{label}-b", label, claim=f"{label}-b", scheduler_name=scheduler)
        if label == "ext":
            assert gangs.bound("ext-a") == node and gangs.bound("ext-b") == node
            assert allocated_on(gangs, "ext-a")[1] == [f"{node}/a100"]
            assert allocated_on(gangs, "ext-b")[1] == [f"{node}/h100"]
            for name in ("ext-a", "ext-b"):  # the extender's claims go: the reference needs the devices
                gangs.admin.delete(f"/api/v1/namespaces/{gangs.namespace}/pods/{name}", grace_seconds=0)
            eventually(lambda: not any((c.get("status") or {}).get("allocation") for c in gangs.claims()),
                       what="the extender's claims released")  # fmt: skip
    condition = eventually(
        lambda: (c := group_condition(gangs, "ref")) and c.get("status") == "False" and c, what="in-tree gang failed"
    )
    assert condition["reason"] == "Unschedulable"
    assert not gangs.get_pod("ref-a")["spec"].get("nodeName") and not gangs.get_pod("ref-b")["spec"].get("nodeName")


def test_a_gang_that_does_not_fit_leaves_no_device_allocated_and_no_member_bound(
    gangs: Scenario, gang_deployment: Deployment
) -> None:
    nodes = gangs.nodes(2)
    for name in nodes:
        gangs.gpus(name, 2)
    gpu = gangs.device_class()
    gangs.template("two-gpus", gpu, count=2)
    pod_group(gangs, "too-big", 3)
    for i in range(3):
        member(gangs, f"w{i}", "too-big", template="two-gpus")
    # the first passes are refused (Unschedulable); unchanged, they are answered Error, which puts
    # the gang into kube-scheduler's error backoff instead of back-to-back retries
    condition = eventually(
        lambda: (c := group_condition(gangs, "too-big")) and c.get("reason") == "SchedulerError" and c,
        what="gang retries backed off",
    )
    assert condition["status"] == "False"
    assert "2 of 3 waiting members fit together (minCount 3)" in condition["message"], condition
    event = gangs.event("w0", "FailedScheduling")
    assert "gang" in event["message"] or "pod group" in event["message"], event["message"]
    assert not any(gangs.get_pod(f"w{i}")["spec"].get("nodeName") for i in range(3))
    assert not any((c.get("status") or {}).get("allocation") for c in gangs.claims())
    (pair,) = gang_deployment.pairs
    plans = pair.extender.get("/debug/podgroups/" + gangs.namespace + "/too-big")
    assert plans["pass"]["plan"] is None and "2 of 3 waiting members fit together" in plans["pass"]["reason"]


def fabric_racks(scenario: Scenario, plane: ControlPlane, counts: tuple[int, int, int, int]) -> dict[str, str]:
    """Racks r1 = {n1, n2} and r2 = {n3, n4} with ``counts`` GPUs, one fabric device per rack
    (``domain-r1``, ``domain-r2``) reachable from its rack's nodes only (spec E4); node -> rack."""
    racks = {f"{scenario.prefix}-n1": "r1", f"{scenario.prefix}-n2": "r1", f"{scenario.prefix}-n3": "r2",
             f"{scenario.prefix}-n4": "r2"}  # fmt: skip
    for name, rack in racks.items():
        plane.add_nodes([name], labels={"example.com/rack": rack})
        scenario._made.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    for name, count in zip(racks, counts, strict=True):
        scenario.gpus(name, count)
    for rack in ("r1", "r2"):
        selector = {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "example.com/rack", "operator": "In", "values": [rack]}]}]}  # fmt: skip
        scenario.create(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{scenario.prefix}-fabric-{rack}"},
                "spec": {
                    "driver": scenario.driver,
                    "pool": {"name": f"fabric-{rack}", "generation": 1, "resourceSliceCount": 1},
                    "nodeSelector": selector,
                    "devices": [{"name": f"domain-{rack}", "attributes": {"model": {"string": "fabric"}}}],
                },
            }
        )
    return racks


def fabric_member(scenario: Scenario, name: str) -> None:
    """A member of PodGroup ``pg`` with four GPUs of its own and the group's ``domain`` claim."""
    spec: dict[str, Any] = {
        "schedulerName": SCHEDULER_NAME,
        "schedulingGroup": {"podGroupName": "pg"},
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"claims": [{"name": "gpus"}, {"name": "domain"}]}}],
        "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "four-gpus"},
                           {"name": "domain", "resourceClaimTemplateName": "domain"}],
    }  # fmt: skip
    scenario.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": scenario.namespace},
                     "spec": spec})  # fmt: skip


def fabric_group(scenario: Scenario) -> None:
    gpu = scenario.device_class("gpu", cel=f'device.attributes["{scenario.driver}"].model != "fabric"')
    fabric = scenario.device_class("fabric", cel=f'device.attributes["{scenario.driver}"].model == "fabric"')
    scenario.template("four-gpus", gpu, count=4)
    scenario.template("domain", fabric)
    scenario.create(
        {
            "apiVersion": PODGROUPS,
            "kind": "PodGroup",
            "metadata": {"name": "pg", "namespace": scenario.namespace},
            "spec": {
                "schedulingPolicy": {"gang": {"minCount": 2}},
                "resourceClaims": [{"name": "domain", "resourceClaimTemplateName": "domain"}],
            },
        }
    )


def test_a_pod_group_claim_is_allocated_once_for_the_group_and_every_member_is_where_it_allows(
    gangs: Scenario, gang_deployment: Deployment
) -> None:
    """Spec E4 with the extender: racks r1 = {n1, n2} (4 GPUs each) and r2 = {n3 (4), n4 (2)}, one
    fabric device per rack reachable from its rack; a PodGroup claim from a template (the
    resourceClaim controller makes it for the group) asks for a fabric device, each member for 4
    GPUs. The gang fits only in r1: the group's claim must be ``domain-r1``, reserved for the
    PodGroup, and both members bound in r1."""
    racks = fabric_racks(gangs, gang_deployment.plane, (4, 4, 4, 2))
    fabric_group(gangs)
    for i in range(2):
        fabric_member(gangs, f"m{i}")
    nodes = {gangs.bound(f"m{i}") for i in range(2)}
    assert {racks[n] for n in nodes} == {"r1"} and len(nodes) == 2
    group = gangs.admin.get(f"/apis/{PODGROUPS}/namespaces/{gangs.namespace}/podgroups/pg")
    (status,) = group["status"]["resourceClaimStatuses"]
    claim = eventually(
        lambda: (c := gangs.get_claim(status["resourceClaimName"]))["status"].get("reservedFor") and c,
        what="the group's claim reserved",
    )
    assert [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]] == ["domain-r1"]
    assert claim["status"]["reservedFor"] == [
        {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "pg", "uid": group["metadata"]["uid"]}
    ]


def refuse_claim_status_writes(scenario: Scenario, claims: list[str]) -> str:
    """A ValidatingAdmissionPolicy (and its binding) that makes the API server refuse every status
    update of the named claims of the scenario's namespace: an injected claim-write failure in a
    real bind. Returns the binding's path; the policy is in force once a dry-run update is refused."""
    name = f"{scenario.prefix}-refuse-claim-status"
    names = ", ".join(f"'{claim}'" for claim in claims)
    scenario.create(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": ["resource.k8s.io"],
                            "apiVersions": ["*"],
                            "operations": ["UPDATE"],
                            "resources": ["resourceclaims/status"],
                        }
                    ]
                },
                "validations": [
                    {
                        "expression": f"object.metadata.namespace != '{scenario.namespace}'"
                        f" || !(object.metadata.name in [{names}])",
                        "message": "injected: this claim's status may not be written",
                    }
                ],
            },
        }
    )
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    scenario.create(binding)
    path = f"/apis/resource.k8s.io/v1/namespaces/{scenario.namespace}/resourceclaims/{claims[0]}/status"

    def refused() -> bool:
        try:
            scenario.admin.request("PUT", path, scenario.get_claim(claims[0]), params={"dryRun": "All"})
        except ApiError as exc:
            return "injected" in str(exc.body)
        return False

    eventually(refused, what="the admission policy in force")
    return f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/{name}"


def test_a_claim_write_failing_for_one_member_leaves_no_member_bound(
    gangs: Scenario, gang_deployment: Deployment, in_tree_gangs: str
) -> None:
    """Spec F5: the API server refuses the status write of one member's claim. In-tree, the other
    member is bound anyway (a partial gang); with the extender's bind barrier neither is, and once
    the writes are allowed again the gang is placed whole."""
    nodes = gangs.nodes(2)
    for name in nodes:
        gangs.gpus(name, 2)
    gpu = gangs.device_class()
    for label in ("ext", "ref"):
        for i in range(2):
            gangs.claim(f"{label}-w{i}", gpu, count=2)
    allow = refuse_claim_status_writes(gangs, ["ext-w1", "ref-w1"])
    for label, scheduler in (("ref", in_tree_gangs), ("ext", SCHEDULER_NAME)):
        pod_group(gangs, label, 2)
        for i in range(2):
            member(gangs, f"{label}-w{i}", label, claim=f"{label}-w{i}", scheduler_name=scheduler)
        if label == "ref":
            gangs.bound("ref-w0")  # in-tree: a partial gang
            assert not gangs.get_pod("ref-w1")["spec"].get("nodeName")
            gangs.admin.delete(f"/api/v1/namespaces/{gangs.namespace}/pods/ref-w0", grace_seconds=0)
            gangs.admin.delete(f"/api/v1/namespaces/{gangs.namespace}/pods/ref-w1", grace_seconds=0)
            eventually(lambda: not (gangs.get_claim("ref-w0").get("status") or {}).get("allocation"),
                       what="the reference's devices released")  # fmt: skip
    (pair,) = gang_deployment.pairs
    aborted = eventually(
        lambda: [
            e
            for e in pair.extender.events()
            if e.get("event") == "bind.finished" and "no member is bound" in str(e.get("reason"))
        ],
        what="a round of the gang's binds given up",
    )
    assert aborted[0]["pod"] == f"{gangs.namespace}/ext-w0", aborted
    assert not gangs.get_pod("ext-w0")["spec"].get("nodeName")
    assert not gangs.get_pod("ext-w1")["spec"].get("nodeName")
    assert not (gangs.get_claim("ext-w0").get("status") or {}).get("allocation")
    gangs.admin.delete(allow)
    placed = {gangs.bound(f"ext-w{i}") for i in range(2)}
    assert placed == set(nodes)
    for i in range(2):
        allocated_on(gangs, f"ext-w{i}")


def group_claim(scenario: Scenario) -> dict[str, Any]:
    group = scenario.admin.get(f"/apis/{PODGROUPS}/namespaces/{scenario.namespace}/podgroups/pg")
    (status,) = group["status"]["resourceClaimStatuses"]
    return scenario.get_claim(status["resourceClaimName"])


def test_a_pod_group_claim_left_where_its_gang_cannot_go_is_freed_and_the_gang_placed_elsewhere(
    gangs: Scenario, gang_deployment: Deployment
) -> None:
    """Spec F7: the resourceclaim controller keeps a PodGroup's claim allocated after its members
    are gone. A first gang runs in one rack and leaves; other pods then fill that rack. The next
    members of the group fit only in the other rack: the extender frees the group's claim
    (no member placed, reserved for the group alone) and places them there."""
    racks = fabric_racks(gangs, gang_deployment.plane, (4, 4, 4, 4))
    fabric_group(gangs)
    for i in range(2):
        fabric_member(gangs, f"m{i}")
    first = {racks[gangs.bound(f"m{i}")] for i in range(2)}
    assert len(first) == 1
    (rack,) = first
    other = "r2" if rack == "r1" else "r1"
    eventually(lambda: group_claim(gangs)["status"].get("reservedFor"), what="the group's claim reserved")
    for i in range(2):
        gangs.admin.delete(f"/api/v1/namespaces/{gangs.namespace}/pods/m{i}", grace_seconds=0)
    # the members' own claims go with them; the group's stays allocated (upstream keeps it)
    eventually(
        lambda: all((c.get("status") or {}).get("allocation") is None for c in gangs.claims()
                    if c["metadata"]["name"].startswith("m")),
        what="the members' own claims released",
    )  # fmt: skip
    assert [r["device"] for r in group_claim(gangs)["status"]["allocation"]["devices"]["results"]] == [f"domain-{rack}"]
    for i in range(2):  # fill the rack the group's claim is in
        gangs.claim(f"filler-{i}", f"{gangs.prefix}-gpu", count=4)
        gangs.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"filler-{i}", "namespace": gangs.namespace},
                "spec": {
                    "schedulerName": SCHEDULER_NAME,
                    "terminationGracePeriodSeconds": 0,
                    "nodeSelector": {"example.com/rack": rack},
                    "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                    "resources": {"claims": [{"name": "gpus"}]}}],
                    "resourceClaims": [{"name": "gpus", "resourceClaimName": f"filler-{i}"}],
                },
            }
        )  # fmt: skip
    assert {racks[gangs.bound(f"filler-{i}")] for i in range(2)} == {rack}
    for i in range(2, 4):
        fabric_member(gangs, f"m{i}")
    placed = {racks[gangs.bound(f"m{i}")] for i in range(2, 4)}
    assert placed == {other}
    claim = eventually(
        lambda: (c := group_claim(gangs))["status"].get("reservedFor") and c, what="the group's claim reserved again"
    )
    assert [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]] == [f"domain-{other}"]
    assert [r["resource"] for r in claim["status"]["reservedFor"]] == ["podgroups"]


def gpu_holders(scenario: Scenario, node_classes: dict[str, str], priorities: dict[str, str]) -> list[str]:
    """Two one-GPU pods per node (``<node class>-<i>``), each bound there, Running, with the
    kubelet's finalizer (test_preemption.py): every GPU of the nodes held. ``node_classes``: a
    DeviceClass per node whose selector reaches that node's GPUs only; ``priorities``: the
    PriorityClass of each node class's holders."""
    names = []
    for index, (label, device_class) in enumerate(node_classes.items()):
        for i in range(2):
            name = f"{label}-{i}"
            running_holder(scenario, name, device_class, priorities[label], f"2026-01-01T00:0{index}:{i:02d}Z")
            names.append(name)
    return names


def two_nodes_of_holders(scenario: Scenario, levels: dict[str, int]) -> tuple[list[str], list[str], dict[int, str]]:
    """Two nodes of two GPUs (models ``a`` and ``b``), every GPU held by a pod of the priority
    ``levels`` gives its node's model; a template ``two`` of two GPUs of any model. The nodes,
    the holders and the PriorityClasses."""
    classes = priority_classes(scenario)
    nodes = scenario.nodes(2)
    for node, model in zip(nodes, ("a", "b"), strict=True):
        scenario.gpus(node, 2, model=model)
    per_node = {
        model: scenario.device_class(model, cel=f'device.attributes["{scenario.driver}"].model == "{model}"')
        for model in ("a", "b")
    }
    holders = gpu_holders(scenario, per_node, {model: classes[levels[model]] for model in per_node})
    scenario.template("two", scenario.device_class(), count=2)
    return nodes, holders, classes


def test_a_gang_that_fits_only_without_lower_priority_pods_evicts_them_and_runs_whole(gangs: Scenario) -> None:
    """Spec §7.8: every GPU held by priority-100 pods; a gang of two members of priority 1000, two
    GPUs each. kube-scheduler preempts nothing for devices; the extender evicts all four holders
    for the gang (through the Eviction API), holds the freed GPUs, and both members bind once the
    holders are gone and their claims deallocated."""
    nodes, holders, classes = two_nodes_of_holders(gangs, {"a": LOW, "b": LOW})
    try:
        pod_group(gangs, "trainers", 2)
        for i in range(2):
            member(gangs, f"w{i}", "trainers", template="two", priority=classes[HIGH])
        for name in holders:
            evicted = eventually(lambda name=name: terminating(gangs, name), what=f"{name} evicted")
            (target,) = [c for c in evicted["status"]["conditions"] if c["type"] == "DisruptionTarget"]
            assert target["reason"] == "EvictionByEvictionAPI"
            assert f"Preempted by pod group {gangs.namespace}/trainers" in gangs.event(name, "Preempted")["message"]
        for i in range(2):
            assert "to free devices for gang" in gangs.event(f"w{i}", "Preempting")["message"]
        # while the holders terminate, no member is bound
        assert not any(gangs.get_pod(f"w{i}")["spec"].get("nodeName") for i in range(2))
        for name in holders:
            kubelet_done(gangs, name)
        placed = {f"w{i}": gangs.bound(f"w{i}") for i in range(2)}
        assert sorted(placed.values()) == sorted(nodes)
        devices = [d for i in range(2) for d in eventually(lambda i=i: allocated_on(gangs, f"w{i}"), what="claims")[1]]
        assert len(devices) == len(set(devices)) == 4
    finally:
        for name in holders:
            kubelet_done(gangs, name)


def test_a_gang_that_would_still_not_fit_evicts_nobody(gangs: Scenario) -> None:
    """All or nothing: node b's holders outrank the gang, so evicting node a's would place one
    member of two. Nobody is evicted; the members wait, told why."""
    _, holders, classes = two_nodes_of_holders(gangs, {"a": LOW, "b": TOP})
    try:
        pod_group(gangs, "trainers", 2)
        for i in range(2):
            member(gangs, f"w{i}", "trainers", template="two", priority=classes[HIGH])
        # the extender decides on preemption before it answers: once a pass with both members has
        # been answered, it has (a first pass may come before the extender's watch shows w1)
        eventually(
            lambda: [
                e
                for e in gangs.events_for("w0", "FailedScheduling")
                if "0 of 2 waiting members fit together" in e["message"]
            ],
            what="a pass of both members refused",
        )
        assert not any(terminating(gangs, name) for name in holders)
        assert not gangs.events_for("a-0", "Preempted") and not gangs.events_for("a-1", "Preempted")
        assert not any(gangs.get_pod(f"w{i}")["spec"].get("nodeName") for i in range(2))
    finally:
        for name in holders:
            kubelet_done(gangs, name)


def test_with_topology_aware_scheduling_on_the_gang_lands_in_the_placement_the_extender_planned(
    gangs: Scenario, gang_deployment: Deployment
) -> None:
    """TopologyAwareWorkloadScheduling on: kube-scheduler tries each rack as a placement in one cycle
    and binds the one it scores best. Both racks could hold the gang; the extender plans the first
    placement it is offered and refuses the others (``placed in <key>=<rack>``), so the rack the gang
    lands in is the one its plan (and its holds) were made for."""
    key = f"{gangs.prefix}.example.com/rack"
    nodes = {rack: gangs.nodes(2, labels={key: rack}, first=1 + 2 * i) for i, rack in enumerate(("r1", "r2"))}
    for names in nodes.values():
        for name in names:
            gangs.gpus(name, 2)
    gangs.template("two-gpus", gangs.device_class(), count=2)
    gangs.create(
        {
            "apiVersion": PODGROUPS,
            "kind": "PodGroup",
            "metadata": {"name": "racked", "namespace": gangs.namespace},
            "spec": {
                "schedulingPolicy": {"gang": {"minCount": 2}},
                "schedulingConstraints": {"topology": [{"key": key}]},
            },
        }
    )
    group = gangs.admin.get(f"/apis/{PODGROUPS}/namespaces/{gangs.namespace}/podgroups/racked")
    assert group["spec"].get("schedulingConstraints"), "the API server dropped the constraints: gate off?"
    for i in range(2):
        member(gangs, f"w{i}", "racked", template="two-gpus")
    placed = {gangs.bound(f"w{i}") for i in range(2)}
    racks = {rack for rack, names in nodes.items() if placed & set(names)}
    assert len(racks) == 1 and len(placed) == 2, (placed, nodes)
    (pair,) = gang_deployment.pairs
    pass_ = pair.extender.get(f"/debug/podgroups/{gangs.namespace}/racked")["pass"]
    assert pass_["domain"] == racks.pop(), pass_
