"""The task prolog script (sh + awk) on job files the prolog writes: each task gets the
variables of exactly the devices Slurm bound to it, ``unset`` for the rest."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelkit.bridge.slurm.task_script import script
from accelkit.bridge.slurm.task_views import JobDevice, job_file, kept_files, kinds
from accelkit.errors import InvalidResourceArgument

GPUS = [
    JobDevice("gpu", i, "cuda", f"cuda{i}", {"MOCK_CUDA_DEVICES": f"cuda{i}"}) for i in (1, 2, 3)
]
TPUS = [JobDevice("tpu", i, "tpu", f"tpu{i}", {"MOCK_TPU_DEVICES": f"tpu{i}"}) for i in (0, 1)]
JOB_ENV = {"MOCK_CUDA_DEVICES": "cuda1,cuda2,cuda3", "MOCK_TPU_DEVICES": "tpu0,tpu1"}


def write_job(state: Path, job: str, text: str) -> None:
    (state / "slurm").mkdir(parents=True, exist_ok=True)
    (state / "slurm" / f"{job}.env").write_text(text)


def run(
    state: Path, env: dict[str, str], scontrol: str = "scontrol"
) -> subprocess.CompletedProcess[str]:
    path = state / "task-prolog.sh"
    path.write_text(script(str(state), scontrol))
    base = {"PATH": os.environ["PATH"]}
    return subprocess.run(
        ["sh", str(path)], env={**base, **env}, capture_output=True, text=True, check=False
    )


def lines(done: subprocess.CompletedProcess[str]) -> dict[str, str | None]:
    assert done.returncode == 0, done.stderr
    found: dict[str, str | None] = {}
    for line in done.stdout.splitlines():
        word, _, rest = line.partition(" ")
        if word == "export":
            key, _, value = rest.partition("=")
            found[key] = value
        else:
            assert word == "unset", line
            found[rest] = None
    return found


@pytest.fixture
def state(tmp_path: Path) -> Path:
    write_job(
        tmp_path, "7", job_file("7", JOB_ENV, [*GPUS, *TPUS], {"gpu": "gpu", "tpu": "scontrol"})
    )
    return tmp_path


def fake_scontrol(tmp_path: Path, output: str, code: int = 0) -> str:
    path = tmp_path / "scontrol"
    (tmp_path / "step.txt").write_text(output)
    path.write_text(f"#!/bin/sh\ncat {tmp_path}/step.txt\nexit {code}\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize(
    ("env", "gpus"),
    [
        ({"SLURM_STEP_GPUS": "2"}, "cuda2"),  # --gpus-per-task: Slurm narrows it per task
        ({"SLURM_STEP_GPUS": "1,3"}, "cuda1,cuda3"),
        ({"GPU_DEVICE_ORDINAL": "3"}, "cuda3"),  # no SLURM_STEP_GPUS: Slurm's own ordinal
        ({"CUDA_VISIBLE_DEVICES": "0,1"}, "cuda1,cuda2"),  # constrained: positions in the job
        ({"CUDA_VISIBLE_DEVICES": "GPU-aaaa"}, None),  # not Slurm's: a plugin's, inherited
        ({}, None),  # a step without GPUs
        ({"SLURM_STEP_GPUS": ""}, None),
        ({"SLURM_STEP_GPUS": "9"}, None),  # not the job's: never more than Slurm bound
    ],
)
def test_a_step_gets_the_gpus_slurm_bound(
    state: Path, tmp_path: Path, env: dict[str, str], gpus: str | None
) -> None:
    scontrol = fake_scontrol(tmp_path, "StepId=7.0 UserId=0\n   TresPerStep=cpu:1\n")
    found = lines(run(state, {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", **env}, scontrol))
    assert found["MOCK_CUDA_DEVICES"] == gpus
    assert found["MOCK_TPU_DEVICES"] is None


def test_the_batch_step_gets_the_whole_job(state: Path) -> None:
    found = lines(run(state, {"SLURM_JOB_ID": "7"}))
    assert found == {"MOCK_CUDA_DEVICES": "cuda1,cuda2,cuda3", "MOCK_TPU_DEVICES": "tpu0,tpu1"}


@pytest.mark.parametrize(
    ("step", "tpus"),
    [
        ("   TresPerNode=gres:tpu:2\n", "tpu0,tpu1"),  # the job's whole count
        ("   TresPerNode=gres:gpu:3,gres:tpu:2\n", "tpu0,tpu1"),
        ("   TresPerNode=gres:tpu:acme:2\n", "tpu0,tpu1"),
        ("   TresPerNode=gres:gpu:1\n", None),  # no tpu in the step
        ("   TresPerStep=cpu:1\n", None),
        ("   TresPerNode=gres:tpu:1\n", None),  # which one Slurm does not say: none
        ("     Nodes=n GRES=tpu:acme:1(IDX:1)\n   TresPerNode=gres:tpu:1\n", "tpu1"),
        ("     Nodes=n GRES=gpu:1(IDX:2),tpu:acme:1(IDX:0)\n", "tpu0"),
    ],
)
def test_other_gres_come_from_the_steps_scontrol(
    state: Path, tmp_path: Path, step: str, tpus: str | None
) -> None:
    scontrol = fake_scontrol(tmp_path, f"StepId=7.3 UserId=0\n{step}")
    found = lines(run(state, {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "3"}, scontrol))
    assert found["MOCK_TPU_DEVICES"] == tpus


def test_a_failing_scontrol_gives_no_other_gres(state: Path, tmp_path: Path) -> None:
    scontrol = fake_scontrol(tmp_path, "slurm_load_jobs error: Unable to contact", code=1)
    done = run(state, {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "3", "SLURM_STEP_GPUS": "1"}, scontrol)
    assert lines(done) == {"MOCK_CUDA_DEVICES": "cuda1", "MOCK_TPU_DEVICES": None}
    assert "show step failed" in done.stderr


def test_a_job_without_a_file_gets_nothing(tmp_path: Path) -> None:
    done = run(tmp_path, {"SLURM_JOB_ID": "8", "SLURM_STEP_GPUS": "0"})
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "error: SLURM_JOB_ID is unset: run this as Slurm's TaskProlog\n"),
        ({"SLURM_JOB_ID": "7;x"}, "error: SLURM_JOB_ID is '7;x', not a job id\n"),
    ],
)
def test_no_job_id_is_an_error(tmp_path: Path, env: dict[str, str], message: str) -> None:
    done = run(tmp_path, env)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", message)


def test_a_file_of_something_else_is_an_error(tmp_path: Path) -> None:
    write_job(tmp_path, "4", '{"env": {}}\n')
    done = run(tmp_path, {"SLURM_JOB_ID": "4"})
    assert done.returncode == 2
    assert done.stderr == f"error: {tmp_path}/slurm/4.env is not a job file of this accelkit\n"
    assert done.stdout == ""


def test_values_are_printed_as_slurm_reads_them(tmp_path: Path) -> None:
    device = JobDevice("gpu", 0, "x", "x0", {"B": "two words; $(x)", "A": "a=b"})
    write_job(
        tmp_path, "4", job_file("4", {"B": "two words; $(x)", "A": "a=b"}, [device], {"gpu": "gpu"})
    )
    done = run(tmp_path, {"SLURM_JOB_ID": "4"})
    assert done.stdout.splitlines() == ["export A=a=b", "export B=two words; $(x)"]


@pytest.mark.parametrize(
    ("env", "name"), [({"A": "x\ny"}, "A"), ({"A B": "x"}, "A B"), ({"A": "x\ty"}, "A")]
)
def test_what_a_task_prolog_cannot_export_is_refused(env: dict[str, str], name: str) -> None:
    device = JobDevice("gpu", 0, "x", "x0", {})
    with pytest.raises(InvalidResourceArgument, match=f"job 4: variable '{name}' cannot be"):
        job_file("4", env, [device], {"gpu": "gpu"})


def test_kinds_of_variables() -> None:
    devices = [
        JobDevice("gpu", i, "c", f"c{i}", {"L": f"u{i}", "S": "same", "W": f"{i}"})
        for i in range(3)
    ]
    found = kinds({"L": "u0,u1,u2", "S": "same", "W": "3 devices", "J": "job"}, devices)
    assert {k: v[0] for k, v in found.items()} == {
        "L": "list", "S": "same", "W": "whole", "J": "whole"
    }  # fmt: skip
    assert found["J"][1] == devices  # a variable no device gives alone is the whole job's


def test_the_files_a_job_holds_are_kept(tmp_path: Path) -> None:
    text = job_file("4", {}, [GPUS[0]], {"gpu": "gpu"}, ["/dev/gpu1"])
    assert kept_files(text) == ["/dev/gpu1"]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(st.integers(0, 15), min_size=1, max_size=8, unique=True).flatmap(
        lambda held: st.tuples(
            st.just(sorted(held)), st.lists(st.sampled_from(sorted(held)), unique=True)
        )
    ),
    st.booleans(),
)
def test_a_task_never_gets_a_device_slurm_did_not_bind(
    tmp_path: Path, job: tuple[list[int], list[int]], uuids: bool
) -> None:
    held, bound = job
    name = "CUDA_VISIBLE_DEVICES" if uuids else "MOCK_CUDA_DEVICES"
    devices = [JobDevice("gpu", i, "cuda", f"cuda{i}", {name: f"GPU-{i}", "K": "k"}) for i in held]
    env = {name: ",".join(f"GPU-{i}" for i in held), "K": "k", "N": str(len(held))}
    write_job(tmp_path, "5", job_file("5", env, devices, {"gpu": "gpu"}))
    step = {"SLURM_STEP_GPUS": ",".join(map(str, bound))} if bound else {}
    found = lines(run(tmp_path, {"SLURM_JOB_ID": "5", "SLURM_STEP_ID": "1", **step}))
    want = ",".join(f"GPU-{i}" for i in sorted(bound)) if bound else None
    assert found[name] == want
    assert found["K"] == ("k" if bound else None)
    assert found["N"] == (str(len(held)) if sorted(bound) == held else None)
