"""The create body fitted to the engine, the container names and the engine facts (no engine)."""

from __future__ import annotations

import re

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelkit.errors import WorkloadError
from accelkit.runtime.base import LaunchSpec
from accelkit.runtime.docker_body import EngineFacts, container_name, plan_create
from accelkit.runtime.render.docker import DockerApiVersion
from accelkit.types import AgentId, Mount, MountType, Workload, WorkloadConfig

OLD = EngineFacts(DockerApiVersion(1, 41), cdi=False, product="Docker Engine 20.10.24")
NEW = EngineFacts(DockerApiVersion(1, 47), cdi=True, product="Docker Engine 27.3.1")
DOCKER_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]+$")
DEVICE = Mount("/dev/accel0", "/dev/accel0", MountType.DEVICE)


def spec(config: WorkloadConfig, *argv: str, image: str | None = "img:1") -> LaunchSpec:
    return LaunchSpec(
        AgentId("a"), Workload.container("accelkit-a-1"), argv, config, ledger_key="k", image=image
    )


@given(st.text(max_size=80))
def test_a_container_name_is_valid_and_fresh_for_any_agent(agent: str) -> None:
    first, second = container_name(AgentId(agent)), container_name(AgentId(agent))
    assert DOCKER_NAME.match(first), first
    assert first.startswith("accelkit-")
    assert first != second
    assert len(first) <= 64


def test_the_body_carries_image_command_labels_and_the_rendered_config() -> None:
    config = WorkloadConfig(env_vars={"X": "1"}, memory_limit=1024, cpuset_cpus=(0, 1))
    body = plan_create(spec(config, "sh", "-c", "true"), OLD).body
    assert body["Image"] == "img:1"
    assert body["Cmd"] == ["sh", "-c", "true"]
    assert body["Env"] == ["X=1"]
    assert body["Labels"] == {
        "io.accelkit.agent": "a",
        "io.accelkit.workload": "accelkit-a-1",
        "io.accelkit.ledger-key": "k",
    }
    assert body["HostConfig"]["Memory"] == body["HostConfig"]["MemorySwap"] == 1024
    assert body["HostConfig"]["CpusetCpus"] == "0-1"
    assert "Cmd" not in plan_create(spec(config), OLD).body  # the image's own command


def test_the_booking_ledger_s_identity_is_a_label_where_it_is_known() -> None:
    labelled = attrs.evolve(spec(WorkloadConfig(), "true"), ledger_id="0123abcd")
    assert plan_create(labelled, OLD).body["Labels"]["io.accelkit.ledger"] == "0123abcd"
    assert (
        "io.accelkit.ledger" not in plan_create(spec(WorkloadConfig(), "true"), OLD).body["Labels"]
    )


def test_no_image_is_refused() -> None:
    with pytest.raises(WorkloadError, match="needs an image"):
        plan_create(spec(WorkloadConfig(), "true", image=None), OLD)


def test_cdi_requests_go_only_to_an_engine_with_cdi() -> None:
    config = WorkloadConfig(mounts=[DEVICE], cdi_devices=["vendor.com/accel=0"])
    with_cdi = plan_create(spec(config), NEW).body["HostConfig"]
    without = plan_create(spec(config), OLD).body["HostConfig"]
    assert with_cdi["DeviceRequests"] == [{"Driver": "cdi", "DeviceIDs": ["vendor.com/accel=0"]}]
    assert "DeviceRequests" not in without
    assert without["Devices"] == [
        {"PathOnHost": "/dev/accel0", "PathInContainer": "/dev/accel0", "CgroupPermissions": "rwm"}
    ]


def test_cdi_without_device_nodes_on_an_engine_without_cdi_is_refused() -> None:
    config = WorkloadConfig(cdi_devices=["vendor.com/accel=0"])
    with pytest.raises(WorkloadError, match=r"no CDI support .* vendor.com/accel=0"):
        plan_create(spec(config), OLD)


def test_below_api_1_44_one_network_is_attached_at_create_time() -> None:
    config = WorkloadConfig(networks=["front", "back", "mgmt"])
    old, new = plan_create(spec(config), OLD), plan_create(spec(config), NEW)
    assert old.body["NetworkingConfig"] == {"EndpointsConfig": {"front": {}}}
    assert old.later_networks == ("back", "mgmt")
    assert old.body["HostConfig"]["NetworkMode"] == new.body["HostConfig"]["NetworkMode"] == "front"
    assert list(new.body["NetworkingConfig"]["EndpointsConfig"]) == ["front", "back", "mgmt"]
    assert new.later_networks == ()


def test_engine_facts_from_dockerd_and_podman_answers() -> None:
    dockerd = EngineFacts.from_engine(
        {
            "ApiVersion": "1.41",
            "Version": "20.10.24",
            "Components": [{"Name": "Engine", "Version": "20.10.24"}],
        },
        {"CDISpecDirs": None},
    )
    podman = EngineFacts.from_engine(
        {"ApiVersion": "1.41", "Components": [{"Name": "Podman Engine", "Version": "4.3.1"}]}, {}
    )
    recent = EngineFacts.from_engine({"ApiVersion": "1.47"}, {"CDISpecDirs": ["/etc/cdi"]})
    assert dockerd == EngineFacts(DockerApiVersion(1, 41), cdi=False, product="Engine 20.10.24")
    assert podman.product == "Podman Engine 4.3.1"
    assert (recent.api_version, recent.cdi) == (DockerApiVersion(1, 47), True)
    assert dockerd.supported
    assert not EngineFacts.from_engine({"ApiVersion": "1.39"}, {}).supported


def test_an_unparsable_api_version_is_a_workload_error() -> None:
    with pytest.raises(WorkloadError, match=r"must look like '1\.41'"):
        EngineFacts.from_engine({"ApiVersion": "latest"}, {})


names = st.text(alphabet="abcdefghij-", min_size=1, max_size=8)


@given(
    networks=st.lists(names, unique=True, max_size=4),
    minor=st.integers(min_value=40, max_value=50),
    cdi=st.booleans(),
)
def test_every_network_is_attached_once_and_cdi_only_where_the_engine_takes_it(
    networks: list[str], minor: int, cdi: bool
) -> None:
    facts = EngineFacts(DockerApiVersion(1, minor), cdi=cdi, product="Docker Engine")
    config = WorkloadConfig(mounts=[DEVICE], networks=networks, cdi_devices=["vendor.com/accel=0"])
    plan = plan_create(spec(config), facts)
    at_create = list(plan.body.get("NetworkingConfig", {}).get("EndpointsConfig", {}))
    assert at_create + list(plan.later_networks) == networks
    assert len(at_create) == min(len(networks), len(networks) if minor >= 44 else 1)
    host = plan.body["HostConfig"]
    assert ("DeviceRequests" in host) == (cdi and minor >= 44)
    assert host["Devices"][0]["PathOnHost"] == "/dev/accel0"  # the nodes, on every engine
    assert host.get("NetworkMode") == (networks[0] if networks else None)
