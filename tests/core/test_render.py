"""Renderers of a merged config: process tree, Docker create body, CDI spec, resource.txt."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelkit.errors import WorkloadError
from accelkit.runtime.render import (
    CDI_VERSIONS,
    ProcessPlan,
    format_cpu_list,
    minimum_cdi_version,
    parse_resource_txt,
    render_cdi_spec,
    render_docker_create,
    render_process,
    render_resource_txt,
)
from accelkit.runtime.render.cdi import cdi_device_name, cdi_kind_problem
from accelkit.runtime.render.docker import DockerApiVersion, docker_networks_to_connect
from accelkit.types import Mount, MountType, WorkloadConfig

SCHEMA = json.loads((Path(__file__).parents[1] / "fixtures" / "cdi-schema.json").read_text())

FULL = WorkloadConfig(
    mounts=[
        Mount("/opt/lib", "/usr/local/lib/vendor", MountType.BIND, read_only=True),
        Mount("/data", "/data"),
        Mount.device("/dev/nvidia0"),
    ],
    env_vars={"CUDA_VISIBLE_DEVICES": "0,1", "OMP_NUM_THREADS": "4"},
    resource_data={"CUDA_GLOBAL_DEVICE_IDS": "0,1"},
    networks=["rdma0"],
    extra_gids=[44, 109],
    extra_syscalls=["perf_event_open"],
    cdi_devices=["nvidia.com/gpu=GPU-1234"],
    cpuset_cpus=[0, 1, 2, 3, 8],
    cpuset_mems=[0],
    memory_limit=8 * 1024**3,
)


def test_cpu_list_notation():
    assert format_cpu_list([8, 0, 1, 2, 3, 3]) == "0-3,8"
    assert format_cpu_list([5]) == "5"
    assert format_cpu_list([1, 3, 5]) == "1,3,5"
    assert format_cpu_list([]) == ""


def test_process_plan_overlays_env_and_carries_affinity_and_limit():
    plan = render_process(FULL, {"PATH": "/bin", "OMP_NUM_THREADS": "64"})
    assert plan.env == {"PATH": "/bin", "OMP_NUM_THREADS": "4", "CUDA_VISIBLE_DEVICES": "0,1"}
    assert plan.cpu_affinity == (0, 1, 2, 3, 8)
    assert plan.memory_limit == 8 * 1024**3
    notes = "\n".join(plan.notes)
    # a bind mount onto another path cannot be honoured; same-path binds and device nodes can
    assert "/opt/lib -> /usr/local/lib/vendor" in notes
    assert "/data ->" not in notes
    assert "gids" in notes
    assert "networks" in notes
    assert "syscalls" in notes
    assert "CDI" in notes
    assert ProcessPlan.from_json(json.loads(json.dumps(plan.to_json()))) == plan


def test_process_plan_of_an_empty_config_changes_nothing():
    plan = render_process(WorkloadConfig(), {"A": "1"})
    assert plan == ProcessPlan(env={"A": "1"})


def test_docker_create_fragment():
    body = render_docker_create(FULL, api_version="1.44", cdi=True)
    assert body["Env"] == ["CUDA_VISIBLE_DEVICES=0,1", "OMP_NUM_THREADS=4"]
    host = body["HostConfig"]
    assert host["Mounts"] == [
        {"Type": "bind", "Source": "/opt/lib", "Target": "/usr/local/lib/vendor", "ReadOnly": True},
        {"Type": "bind", "Source": "/data", "Target": "/data", "ReadOnly": False},
    ]
    assert host["Devices"] == [
        {
            "PathOnHost": "/dev/nvidia0",
            "PathInContainer": "/dev/nvidia0",
            "CgroupPermissions": "rwm",
        }
    ]
    assert host["GroupAdd"] == ["44", "109"]
    assert host["CpusetCpus"] == "0-3,8"
    assert host["CpusetMems"] == "0"
    assert host["Memory"] == host["MemorySwap"] == 8 * 1024**3
    assert host["DeviceRequests"] == [{"Driver": "cdi", "DeviceIDs": ["nvidia.com/gpu=GPU-1234"]}]
    assert body["NetworkingConfig"] == {"EndpointsConfig": {"rdma0": {}}}


@pytest.mark.parametrize(
    ("api_version", "cdi"),
    [("1.41", True), ("1.43", True), ("1.44", False), ("1.51", False), ("1.40", False)],
)
def test_no_cdi_device_request_where_the_engine_cannot_resolve_it(api_version, cdi):
    body = render_docker_create(FULL, api_version=api_version, cdi=cdi)
    assert "DeviceRequests" not in body["HostConfig"]
    # the device nodes are still passed, so the container gets its GPU either way
    assert body["HostConfig"]["Devices"][0]["PathOnHost"] == "/dev/nvidia0"


def test_the_default_fits_an_engine_without_cdi():
    assert render_docker_create(FULL) == render_docker_create(FULL, api_version="1.41", cdi=False)
    assert "DeviceRequests" not in render_docker_create(FULL)["HostConfig"]


def test_one_network_at_create_time_below_api_1_44():
    config = WorkloadConfig(networks=["net-a", "net-b", "net-c"])
    old = render_docker_create(config, api_version="1.43")
    assert old["NetworkingConfig"] == {"EndpointsConfig": {"net-a": {}}}
    assert docker_networks_to_connect(config, api_version="1.43") == ("net-b", "net-c")
    new = render_docker_create(config, api_version=DockerApiVersion(1, 44))
    assert list(new["NetworkingConfig"]["EndpointsConfig"]) == ["net-a", "net-b", "net-c"]
    assert docker_networks_to_connect(config, api_version="1.44") == ()


def test_api_versions_order_numerically():
    assert DockerApiVersion.parse("1.9") < DockerApiVersion.parse("v1.41")
    assert str(DockerApiVersion.parse(" 1.44 ")) == "1.44"


@pytest.mark.parametrize(
    ("api_version", "match"),
    [("1.39", "oldest supported, 1.40"), ("latest", "look like"), ("1", "look like")],
)
def test_unsupported_or_malformed_api_versions_are_refused(api_version, match):
    with pytest.raises(WorkloadError, match=match):
        render_docker_create(FULL, api_version=api_version)
    with pytest.raises(WorkloadError, match=match):
        docker_networks_to_connect(FULL, api_version=api_version)


def test_docker_fragment_of_an_empty_config_is_empty():
    assert render_docker_create(WorkloadConfig()) == {}


def test_cdi_spec_is_valid_against_the_schema():
    spec = render_cdi_spec(
        "accelkit.io/agent-1",
        [("cuda-cuda0", FULL), ("env-only", WorkloadConfig(env_vars={"A": "1"}))],
        common=WorkloadConfig(env_vars={"ACCELKIT": "1"}),
    )
    jsonschema.validate(spec, SCHEMA)
    # additionalGids are a 0.7.0 feature
    assert spec["cdiVersion"] == "0.7.0"
    edits = spec["devices"][0]["containerEdits"]
    assert edits["env"] == ["CUDA_VISIBLE_DEVICES=0,1", "OMP_NUM_THREADS=4"]
    # hostPath equal to path is left out: the field needs 0.5.0 and the runtime reads path
    assert edits["deviceNodes"] == [{"path": "/dev/nvidia0", "permissions": "rwm"}]
    assert edits["mounts"][0] == {
        "hostPath": "/opt/lib",
        "containerPath": "/usr/local/lib/vendor",
        "type": "bind",
        "options": ["ro", "nosuid", "nodev", "bind"],
    }
    assert edits["additionalGids"] == [44, 109]
    assert spec["devices"][1]["containerEdits"] == {"env": ["A=1"]}
    assert spec["containerEdits"] == {"env": ["ACCELKIT=1"]}


def _spec(kind="vendor.com/gpu", name="gpu0", config=None):
    return render_cdi_spec(kind, [(name, config or WorkloadConfig(env_vars={"A": "1"}))])


@pytest.mark.parametrize(
    ("kind", "name", "config", "version"),
    [
        ("vendor.com/gpu", "gpu0", WorkloadConfig(env_vars={"A": "1"}), "0.3.0"),
        ("vendor.com/gpu", "gpu0", WorkloadConfig(mounts=[Mount.device("/dev/x")]), "0.3.0"),
        ("vendor.com/gpu", "gpu0", WorkloadConfig(mounts=[Mount("/a", "/b")]), "0.4.0"),
        (
            "vendor.com/gpu",
            "gpu0",
            WorkloadConfig(mounts=[Mount("/dev/x", "/dev/y", MountType.DEVICE)]),
            "0.5.0",
        ),
        ("vendor.com/gpu", "0", WorkloadConfig(env_vars={"A": "1"}), "0.5.0"),
        ("vendor.com/gpu.x", "gpu0", WorkloadConfig(env_vars={"A": "1"}), "0.6.0"),
        ("vendor.com/gpu", "gpu0", WorkloadConfig(extra_gids=[5]), "0.7.0"),
    ],
)
def test_cdi_version_is_the_lowest_the_contents_need(kind, name, config, version):
    spec = render_cdi_spec(kind, [(name, config)])
    assert spec["cdiVersion"] == version
    jsonschema.validate(spec, SCHEMA)


def test_minimum_version_follows_the_reference_library_for_fields_accelkit_never_writes():
    base = _spec()
    assert minimum_cdi_version(base) == "0.3.0"
    assert minimum_cdi_version({**base, "annotations": {"a": "b"}}) == "0.6.0"
    device = {"name": "d", "containerEdits": {"intelRdt": {"closID": "x"}}}
    assert minimum_cdi_version({**base, "devices": [device]}) == "0.7.0"
    device = {"name": "d", "containerEdits": {"netDevices": [{"hostInterfaceName": "eth0"}]}}
    assert minimum_cdi_version({**base, "devices": [device]}) == "1.1.0"
    spec = {**base, "containerEdits": {"intelRdt": {"enableMonitoring": True}}}
    assert minimum_cdi_version(spec) == "1.1.0"
    assert CDI_VERSIONS[0] == "0.3.0"


@given(
    name=st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9_.:-]{0,10}[A-Za-z0-9])?", fullmatch=True),
    gids=st.lists(st.integers(0, 2**32 - 1), max_size=2),
    bind=st.booleans(),
    host_path=st.booleans(),
)
def test_a_spec_never_claims_less_than_its_fields_need(name, gids, bind, host_path):
    mounts = [Mount("/a", "/b")] if bind else []
    node = Mount("/dev/x", "/dev/y" if host_path else "/dev/x", MountType.DEVICE)
    config = WorkloadConfig(env_vars={"A": "1"}, mounts=[*mounts, node], extra_gids=gids)
    spec = render_cdi_spec("vendor.com/gpu", [(name, config)])
    version = CDI_VERSIONS.index(spec["cdiVersion"])
    assert version >= CDI_VERSIONS.index("0.7.0") * bool(gids)
    assert version >= CDI_VERSIONS.index("0.5.0") * (host_path or not name[0].isalpha())
    assert version >= CDI_VERSIONS.index("0.4.0") * bind
    jsonschema.validate(spec, SCHEMA)


def test_the_schema_fixture_rejects_what_the_spec_forbids():
    good = render_cdi_spec("vendor.com/gpu", [("gpu0", FULL)])
    for broken in (
        {**good, "cdiVersion": "0.2.0"},
        {**good, "kind": "no-slash"},
        {**good, "kind": "9vendor.com/gpu"},
        {**good, "devices": []},
        {**good, "devices": [{"name": "-bad-", "containerEdits": {"env": ["A=1"]}}]},
        {**good, "devices": [{"name": "x", "containerEdits": {}}]},
        {**good, "devices": [{"name": "x", "containerEdits": {"env": ["NOEQUALS"]}}]},
        {**good, "devices": [{"name": "x", "containerEdits": {"additionalGids": [-1]}}]},
        {**good, "surplus": 1},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, SCHEMA)


@pytest.mark.parametrize(
    ("kind", "devices", "match"),
    [
        ("not a kind", [("a", FULL)], "not a CDI kind"),
        ("9vendor.com/gpu", [("a", FULL)], "vendor '9vendor.com' must start with a letter"),
        ("vendor.com/0", [("a", FULL)], "class '0' must start with a letter"),
        ("vendor.com/g", [("a", FULL)], "at least two characters"),
        ("vendor.com/gpu-", [("a", FULL)], "end with a letter or digit"),
        ("vendor.com/gpu", [("bad name!", FULL)], "not a valid CDI device name"),
        ("vendor.com/gpu", [("a", FULL), ("a", FULL)], "not unique"),
        ("vendor.com/gpu", [("a", WorkloadConfig(cpuset_cpus=[0]))], "no container edits"),
        ("vendor.com/gpu", [], "at least one device"),
    ],
)
def test_cdi_spec_refuses_what_the_cdi_library_refuses(kind, devices, match):
    with pytest.raises(ValueError, match=match):
        render_cdi_spec(kind, devices)


def test_cdi_kind_problem_accepts_valid_kinds():
    assert cdi_kind_problem("nvidia.com/gpu") is None
    assert cdi_kind_problem("accelkit.io/agent-1") is None
    assert "not a CDI kind" in str(cdi_kind_problem("vendor.com/"))


def test_cdi_device_names_are_made_valid():
    assert cdi_device_name("cuda", "GPU 0/1") == "cuda-GPU-0-1"
    assert cdi_device_name("mem", "root") == "mem-root"
    with pytest.raises(ValueError, match="CDI device name"):
        cdi_device_name("", "///")


def test_resource_txt_lines_are_exact():
    allocation = {
        "cuda": {"cuda.shares": {"cuda0": Decimal("0.25"), "cuda1": Decimal("0.50")}},
        "mem": {"mem": {"root": Decimal(2**40 + 1)}},
    }
    lines = render_resource_txt(allocation, {"CUDA_GLOBAL_DEVICE_IDS": "0,1"})
    assert lines == [
        "cuda.shares=0.75",
        "mem=1099511627777",
        "cuda.shares@cuda0=0.25",
        "cuda.shares@cuda1=0.5",
        "mem@root=1099511627777",
        "CUDA_GLOBAL_DEVICE_IDS=0,1",
    ]


@given(
    st.dictionaries(
        st.sampled_from(["cuda0", "cuda1", "cuda10"]),
        st.decimals(min_value=0, max_value=10**12, allow_nan=False, allow_infinity=False, places=6),
        min_size=1,
    )
)
def test_resource_txt_round_trips_amounts_without_loss(per_device):
    lines = render_resource_txt({"cuda": {"cuda.shares": per_device}}, {})
    parsed = parse_resource_txt(lines)
    for device_id, amount in per_device.items():
        assert Decimal(parsed[f"cuda.shares@{device_id}"]) == amount
    assert Decimal(parsed["cuda.shares"]) == sum(per_device.values(), Decimal(0))
    assert all("E" not in line and "e+" not in line for line in lines)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"cuda.device": "x"}, "clashes"),
        ({"cuda.device@cuda0": "x"}, "clashes"),
        ({"A=B": "x"}, "cannot be written"),
        ({"": "x"}, "cannot be written"),
        ({"OK": "two\nlines"}, "NUL or newline"),
    ],
)
def test_resource_txt_refuses_ambiguous_lines(data, match):
    allocation = {"cuda": {"cuda.device": {"cuda0": Decimal(1)}}}
    with pytest.raises(WorkloadError, match=match):
        render_resource_txt(allocation, data)


def test_resource_txt_refuses_device_ids_that_break_lines():
    with pytest.raises(WorkloadError, match="cannot be written"):
        render_resource_txt({"x": {"x.device": {"a\nb": Decimal(1)}}}, {})


def test_parse_resource_txt_skips_comments_and_refuses_garbage():
    assert parse_resource_txt(["# c", "", "A=1=2\n"]) == {"A": "1=2"}
    with pytest.raises(WorkloadError, match="line 1"):
        parse_resource_txt(["no equals sign"])


# the fields of POST /containers/create the renderer fills, as the Docker Engine API spec
# (docs/api/v1.40.yaml … v1.51.yaml of moby) types them; written for these tests
_STRINGS = {"type": "array", "items": {"type": "string"}}
DOCKER_CREATE_FRAGMENT = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "Env": {"type": "array", "items": {"type": "string", "pattern": "^[^=]+="}},
        "HostConfig": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "Mounts": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["Type", "Source", "Target"],
                        "properties": {
                            "Type": {"enum": ["bind", "volume", "tmpfs", "npipe"]},
                            "Source": {"type": "string"},
                            "Target": {"type": "string"},
                            "ReadOnly": {"type": "boolean"},
                        },
                    },
                },
                "Devices": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "PathOnHost": {"type": "string"},
                            "PathInContainer": {"type": "string"},
                            "CgroupPermissions": {"type": "string", "pattern": "^[rwm]+$"},
                        },
                    },
                },
                "DeviceRequests": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "Driver": {"type": "string"},
                            "Count": {"type": "integer"},
                            "DeviceIDs": _STRINGS,
                            "Capabilities": {"type": "array", "items": _STRINGS},
                            "Options": {"type": "object"},
                        },
                    },
                },
                "GroupAdd": _STRINGS,
                "CpusetCpus": {"type": "string"},
                "CpusetMems": {"type": "string"},
                "Memory": {"type": "integer", "minimum": 0},
                "MemorySwap": {"type": "integer"},
            },
        },
        "NetworkingConfig": {
            "type": "object",
            "properties": {"EndpointsConfig": {"type": "object"}},
            "additionalProperties": False,
        },
    },
}

CONFIGS = st.builds(
    WorkloadConfig,
    env_vars=st.dictionaries(st.from_regex(r"[A-Z_]{1,8}", fullmatch=True), st.text(max_size=5)),
    mounts=st.lists(
        st.sampled_from(
            [Mount.device("/dev/accel0"), Mount("/a", "/b"), Mount("/c", "/c", read_only=True)]
        ),
        unique=True,
    ),
    networks=st.lists(st.sampled_from(["a", "b", "c", "d"]), unique=True),
    extra_gids=st.lists(st.integers(0, 65535), max_size=2),
    cdi_devices=st.lists(st.sampled_from(["v.com/x=0", "v.com/x=1"]), unique=True),
    cpuset_cpus=st.none() | st.lists(st.integers(0, 63), min_size=1, max_size=4),
    memory_limit=st.none() | st.integers(1, 2**40),
)


@given(config=CONFIGS, minor=st.integers(40, 51), cdi=st.booleans())
def test_every_body_fits_its_api_version(config, minor, cdi):
    version = DockerApiVersion(1, minor)
    body = render_docker_create(config, api_version=version, cdi=cdi)
    jsonschema.validate(body, DOCKER_CREATE_FRAGMENT)
    host = body.get("HostConfig", {})
    requests = host.get("DeviceRequests", [])
    # a CDI request only where the engine resolves it (API 1.44 and CDI on), all of them then
    assert bool(requests) == bool(cdi and minor >= 44 and config.cdi_devices)
    assert all(r["Driver"] == "cdi" for r in requests)
    at_create = list(body.get("NetworkingConfig", {}).get("EndpointsConfig", {}))
    if minor < 44:
        assert len(at_create) <= 1
    later = docker_networks_to_connect(config, api_version=version)
    assert [*at_create, *later] == list(config.networks)
