"""The end-to-end tier: a real control plane (``KUBEBUILDER_ASSETS``, ``tests/controlplane``) with
``deploy/base`` applied, one replica of the Deployment (the real ``dra-extender serve`` and the real
kube-scheduler, both as the ServiceAccount ``deploy/`` defines) shared by the session's tests, and a
``Scenario`` per test. Without the binaries every test here is skipped with the reason printed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.controlplane.assets import assets_or_skip
from tests.controlplane.cluster import ControlPlane
from tests.e2e.harness import IN_TREE, IN_TREE_PROCESS, Deployment, Pair, Scenario
from tests.e2e.harness import scenario as new_scenario


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    plane = ControlPlane(assets_or_skip("end-to-end tier"), tmp_path_factory.mktemp("control-plane"))
    with plane:
        yield plane


@pytest.fixture(scope="session")
def deployment(control_plane: ControlPlane) -> Iterator[Deployment]:
    made = Deployment(control_plane)
    try:
        yield made
    finally:
        made.stop()


@pytest.fixture(scope="session")
def replica(deployment: Deployment) -> Pair:
    """The session's replica (started once; a test that stops it starts its own)."""
    return deployment.pairs[0] if deployment.pairs else deployment.start_pair()


@pytest.fixture
def scenario(deployment: Deployment, replica: Pair) -> Iterator[Scenario]:
    made = Scenario(deployment)
    try:
        yield made
    finally:
        made.cleanup()


@pytest.fixture(scope="module")
def in_tree(deployment: Deployment) -> Iterator[str]:
    """A kube-scheduler without extenders, with the in-tree DynamicResources plugin (on by default
    in 1.36), for the pods of ``schedulerName: in-tree-scheduler``: the reference."""
    configuration = {"leaderElection": {"leaderElect": False}, "profiles": [{"schedulerName": IN_TREE}]}
    deployment.plane.start_scheduler(configuration, name=IN_TREE_PROCESS)
    try:
        yield IN_TREE
    finally:
        deployment.plane.stop_scheduler(IN_TREE_PROCESS)


@pytest.fixture
def reference(deployment: Deployment, in_tree: str) -> Iterator[Scenario]:
    """A second scenario: the in-tree scheduler's side of a comparison."""
    with new_scenario(deployment) as made:
        yield made
