"""The end-to-end tier: a real control plane (``KUBEBUILDER_ASSETS``, ``tests/controlplane``) with
``deploy/base`` applied, one replica of the Deployment (the real ``dra-extender serve`` and the real
kube-scheduler, both as the ServiceAccount ``deploy/`` defines) shared by the session's tests, and a
``Scenario`` per test. Without the binaries every test here is skipped with the reason printed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.controlplane.assets import assets_or_skip
from tests.controlplane.cluster import ControlPlane
from tests.e2e.harness import Deployment, Pair, Scenario


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
