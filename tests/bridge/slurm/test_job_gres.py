"""Reading a job's id and GRES indices, and the names and types gres.conf gets."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelkit.bridge.slurm.gres import slurm_type
from accelkit.bridge.slurm.job_env import job_id_of
from accelkit.bridge.slurm.job_gres import gpu_indices, index_list, scontrol_indices
from accelkit.errors import InvalidResourceArgument

SCONTROL = """JobId=7 JobName=sh
   JobState=RUNNING Reason=None Dependency=(null)
   NodeList=accelkit-test
     Nodes=accelkit-test CPU_IDs=0-1 Mem=0 GRES=gpu:mock_gpu_40g:2(IDX:0-1,3),tpu:acme:1(IDX:1)
     Nodes=other CPU_IDs=0 Mem=0 GRES=tpu:acme:1(IDX:0)
   TresPerNode=gres:tpu:1
"""


def _ranges(indices: list[int]) -> str:
    parts, start = [], None
    for i, n in enumerate(indices):
        if start is None:
            start = n
        if i + 1 == len(indices) or indices[i + 1] != n + 1:
            parts.append(str(start) if start == n else f"{start}-{n}")
            start = None
    return ",".join(parts)


@given(st.sets(st.integers(0, 300)))
def test_index_lists_read_back_what_slurm_prints(indices: set[int]) -> None:
    ordered = sorted(indices)
    assert index_list(_ranges(ordered)) == ordered


@pytest.mark.parametrize(
    "bad", ["a", "1-", "-1", "3-1", "0,x", "1.5", "²", "0-²", "0-99999999999999", "65536"]
)
def test_a_bad_index_list_is_refused(bad: str) -> None:
    with pytest.raises(InvalidResourceArgument, match="not a GRES index list"):
        index_list(bad)  # at once: a huge range is refused before it is expanded


def test_repeated_indices_are_read_once() -> None:
    assert index_list("1,0-2,1") == [0, 1, 2]
    assert index_list("65535") == [65535]


def test_gpu_indices_from_the_prolog_environment() -> None:
    assert gpu_indices({"SLURM_JOB_GPUS": "2,0"}) == [0, 2]
    assert gpu_indices({}) == []


def test_scontrol_indices_of_this_node_only() -> None:
    assert scontrol_indices(SCONTROL, "accelkit-test") == {"gpu": [0, 1, 3], "tpu": [1]}
    assert scontrol_indices(SCONTROL, "other") == {"tpu": [0]}
    assert scontrol_indices(SCONTROL, "elsewhere") == {}


def test_scontrol_indices_of_a_one_node_job_without_a_node_name() -> None:
    one = "   Nodes=n1 CPU_IDs=0 Mem=0 GRES=tpu:2(IDX:0-1)\n"
    assert scontrol_indices(one, None) == {"tpu": [0, 1]}
    assert scontrol_indices("JobId=1 JobState=RUNNING\n", None) == {}


@pytest.mark.parametrize(
    ("model", "expected"),
    [("Mock GPU 40G", "mock_gpu_40g"), ("NVIDIA A100-SXM4-80GB", "nvidia_a100_sxm4_80gb"),
     ("", ""), ("a:b,c=d", "a_b_c_d")],
)  # fmt: skip
def test_types_use_slurms_charset(model: str, expected: str) -> None:
    assert slurm_type(model) == expected


@given(st.text())
def test_any_model_gives_a_type_slurm_can_parse(model: str) -> None:
    kind = slurm_type(model)
    assert all(c.isascii() and (c.isalnum() or c == "_") for c in kind)
    assert not kind.startswith("_")
    assert not kind.endswith("_")


@pytest.mark.parametrize("job_id", ["", "abc", "-1", "7 8", "1/2", "²", "٣"])
def test_a_job_id_is_ascii_digits(job_id: str) -> None:
    with pytest.raises(InvalidResourceArgument, match="not a job id"):
        job_id_of({"SLURM_JOB_ID": job_id})  # it names the ledger's workload and a file


def test_a_job_id_of_digits_is_read() -> None:
    assert job_id_of({"SLURM_JOB_ID": "4711"}) == "4711"
