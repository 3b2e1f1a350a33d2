"""``accelkit slurm`` without a cluster: gres.conf, NodeName lines and the hooks' failures."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from cluster import ACCELKIT, host_toml

DEMO = Path(__file__).parents[3] / "docs" / "examples" / "demo.toml"


def accelkit(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ACCELKIT, *args], capture_output=True, text=True, check=False,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "host.toml"
    path.write_text(host_toml(tmp_path))
    return path


def test_gres_conf_one_line_per_device_in_accelkits_order(config: Path, tmp_path: Path) -> None:
    done = accelkit("slurm", "gres-conf", "--config", str(config))
    assert done.returncode == 0, done.stderr
    cores = f"0-{os.cpu_count() - 1}" if (os.cpu_count() or 1) > 1 else "0"
    assert done.stdout.splitlines() == [
        *(f"Name=gpu Type=mock_gpu_40g File={tmp_path}/dev/gpu{i} Cores={cores}" for i in range(4)),
        *(f"Name=tpu Type=acme File={tmp_path}/dev/tpu{i}" for i in range(2)),
    ]


def test_output_is_written_whole_and_replaces_the_file(config: Path, tmp_path: Path) -> None:
    out = tmp_path / "gres.conf"
    out.write_text("old\n")
    done = accelkit("slurm", "gres-conf", "--config", str(config), "--output", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    text = out.read_text()
    assert text.startswith("# written by 'accelkit slurm gres-conf'\n")
    assert len(text.splitlines()) == 7
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".gres.conf")] == []


def test_output_into_a_missing_directory_is_an_error(config: Path, tmp_path: Path) -> None:
    out = tmp_path / "absent" / "gres.conf"
    done = accelkit("slurm", "gres-conf", "--config", str(config), "--output", str(out))
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: cannot write {out}")


def test_devices_without_nodes_are_counted_and_agents_get_their_own_node_names() -> None:
    done = accelkit("slurm", "gres-conf", "--config", str(DEMO), "--node-name", "demo")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "NodeName=demo-agent-1 Name=gpu Type=mock_gpu_40g Count=1 Cores=1-3",
        "NodeName=demo-agent-1 Name=gpu Type=mock_gpu_40g Count=1 Cores=1-3",
        "NodeName=demo-agent-2 Name=gpu Type=mock_gpu_40g Count=1 Cores=5-7",
        "NodeName=demo-agent-2 Name=gpu Type=mock_gpu_40g Count=1 Cores=5-7",
    ]
    lines = accelkit("slurm", "node-line", "--config", str(DEMO), "--node-name", "demo")
    assert lines.stdout.splitlines() == [
        "NodeName=demo-agent-1 Gres=gpu:mock_gpu_40g:2",
        "NodeName=demo-agent-2 Gres=gpu:mock_gpu_40g:2",
    ]
    one = accelkit("slurm", "node-line", "--config", str(DEMO), "--agent", "agent-2")
    assert one.stdout.split()[1:] == ["Gres=gpu:mock_gpu_40g:2"]


def test_an_unknown_agent_is_refused() -> None:
    done = accelkit("slurm", "gres-conf", "--config", str(DEMO), "--agent", "nope")
    assert done.returncode == 2
    assert "unknown agent 'nope' (agents: agent-1, agent-2)" in done.stderr


def test_prolog_of_a_multi_agent_node_needs_an_agent() -> None:
    done = accelkit("slurm", "prolog", "--config", str(DEMO), env={"SLURM_JOB_ID": "5"})
    assert done.returncode == 2
    assert "several agents (agent-1, agent-2); pick one with --agent" in done.stderr


def test_a_gpu_index_beyond_gres_conf_books_nothing(config: Path, tmp_path: Path) -> None:
    env = {"SLURM_JOB_ID": "12", "SLURM_JOB_GPUS": "1,7", "SLURM_CONF": "/nonexistent"}
    cfg = tmp_path / "gpu-only.toml"
    cfg.write_text(config.read_text().replace('key = "tpu"', 'key = "tpu-unused"'))
    cfg.write_text(
        cfg.read_text().replace(
            'gres-names = { cuda = "gpu" }', 'gres-names = { cuda = "gpu", tpu-unused = "gpu" }'
        )
    )
    done = accelkit("slurm", "prolog", "--config", str(cfg), env=env)
    assert done.returncode == 2, done.stderr
    assert (
        "Slurm allocated gpu indices [7] but this node's gres.conf from accelkit has" in done.stderr
    )
    assert "Traceback" not in done.stderr
    status = accelkit("status", "--json", "--config", str(cfg))
    assert json.loads(status.stdout) == []


def with_scontrol(config: Path, scontrol: str) -> Path:
    text = config.read_text().replace(
        'gres-names = { cuda = "gpu" }', f'gres-names = {{ cuda = "gpu" }}\nscontrol = "{scontrol}"'
    )
    path = config.with_name("with-scontrol.toml")
    path.write_text(text)
    return path


def test_scontrol_that_fails_fails_the_prolog_with_its_message(
    config: Path, tmp_path: Path
) -> None:
    fake = tmp_path / "scontrol"
    fake.write_text(
        "#!/bin/sh\necho 'slurm_load_jobs error: Unable to contact slurm controller'\nexit 1\n"
    )
    fake.chmod(0o755)
    done = accelkit("slurm", "prolog", "--config", str(with_scontrol(config, str(fake))),
                    env={"SLURM_JOB_ID": "12"})  # fmt: skip
    assert done.returncode == 2
    assert done.stderr == (
        f"error: {fake} show job -d 12 failed (1): slurm_load_jobs error: Unable to contact "
        "slurm controller\n"
    )


def test_scontrol_missing_fails_the_prolog(config: Path) -> None:
    cfg = with_scontrol(config, "/nonexistent/scontrol")
    done = accelkit("slurm", "prolog", "--config", str(cfg), env={"SLURM_JOB_ID": "12"})
    assert done.returncode == 2
    assert done.stderr.startswith("error: cannot ask /nonexistent/scontrol about job 12: ")
    assert "Traceback" not in done.stderr


def test_task_prolog_of_an_unbooked_job_prints_nothing(config: Path) -> None:
    done = accelkit("slurm", "task-prolog", "--config", str(config), env={"SLURM_JOB_ID": "3"})
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


@pytest.mark.parametrize(
    ("table", "key", "message"),
    [
        ("gres-names = { cuda = 3 }", "bridge.slurm.gres-names.cuda", "expected a string"),
        ('gres-names = { cuda = "gpu x" }', "bridge.slurm.gres-names.cuda", "not a Slurm GRES"),
        ('gres-names = { cuda = "g,pu" }', "bridge.slurm.gres-names.cuda", "not a Slurm GRES"),
        ('gres-names = { cuda = "1gpu" }', "bridge.slurm.gres-names.cuda", "not a Slurm GRES"),
        ("resume = 1", "bridge.slurm.resume", "expected true or false"),
        ('scontrol = ""', "bridge.slurm.scontrol", ""),
        ("nodes = 1", "bridge.slurm.nodes", "unknown key"),
    ],
)
def test_bad_bridge_slurm_keys_are_config_errors(
    tmp_path: Path, table: str, key: str, message: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(f"[bridge.slurm]\n{table}\n")
    done = accelkit("slurm", "gres-conf", "--config", str(path))
    assert done.returncode == 2
    assert f"key '{key}'" in done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_gres_names_rename_a_plugins_gres(tmp_path: Path, config: Path) -> None:
    path = tmp_path / "renamed.toml"
    path.write_text(config.read_text().replace('{ cuda = "gpu" }', '{ cuda = "gpu", tpu = "npu" }'))
    done = accelkit("slurm", "node-line", "--config", str(path), "--node-name", "n")
    assert done.stdout.split() == ["NodeName=n", "Gres=gpu:mock_gpu_40g:4,npu:acme:2"]


def test_a_plugin_key_that_is_no_gres_name_must_be_named(tmp_path: Path, config: Path) -> None:
    path = tmp_path / "dashed.toml"
    path.write_text(config.read_text().replace('key = "tpu"', 'key = "acme-npu"'))
    for command in ("gres-conf", "node-line"):
        done = accelkit("slurm", command, "--config", str(path))
        assert done.returncode == 2
        assert done.stderr == (
            "error: plugin 'acme-npu': 'acme-npu' is not a Slurm GRES name (a letter, then "
            "letters, digits and '_'); name it in [bridge.slurm] gres-names\n"
        )
    named = tmp_path / "named.toml"
    named.write_text(
        path.read_text().replace('{ cuda = "gpu" }', '{ cuda = "gpu", acme-npu = "npu" }')
    )
    done = accelkit("slurm", "node-line", "--config", str(named), "--node-name", "n")
    name, gres = done.stdout.split()
    assert name == "NodeName=n"
    assert sorted(gres.removeprefix("Gres=").split(",")) == ["gpu:mock_gpu_40g:4", "npu:acme:2"]


def test_unhealthy_and_cordoned_devices_can_be_left_out_and_the_prolog_follows(
    tmp_path: Path, config: Path
) -> None:
    path = tmp_path / "sick.toml"
    path.write_text(
        config.read_text().replace(
            'id = "cuda1"\n', 'id = "cuda1"\nhealth = "unhealthy"\nhealth-reason = "XID 79"\n'
        )
    )
    fake = tmp_path / "scontrol"
    fake.write_text(
        "#!/bin/sh\necho 'JobId=31 JobState=RUNNING StartTime=2026-01-01T00:00:00'\n"
        "echo '   Nodes=n CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:1)'\n"
    )
    fake.chmod(0o755)
    path = with_scontrol(path, str(fake))
    assert accelkit("cordon", "tpu", "tpu0", "--config", str(path)).returncode == 0
    line = accelkit("slurm", "node-line", "--config", str(path), "--node-name", "n",
                    "--leave-out-unhealthy")  # fmt: skip
    assert line.stdout.split() == ["NodeName=n", "Gres=gpu:mock_gpu_40g:3,tpu:acme:1"]
    refused = accelkit("slurm", "gres-conf", "--config", str(path), "--leave-out-unhealthy")
    assert refused.returncode == 2
    assert "--leave-out-unhealthy needs --output" in refused.stderr
    out = tmp_path / "gres.conf"
    done = accelkit("slurm", "gres-conf", "--config", str(path), "--leave-out-unhealthy",
                    "--output", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    files = [w for line in out.read_text().splitlines() for w in line.split() if "File=" in w]
    assert [f.rsplit("/", 1)[1] for f in files] == ["gpu0", "gpu2", "gpu3", "tpu1"]
    # Slurm's gpu index 1 is the second line: cuda2
    env = {"SLURM_JOB_ID": "31", "SLURM_JOB_GPUS": "1"}
    done = accelkit("slurm", "prolog", "--config", str(path), env=env)
    assert done.returncode == 0, done.stderr
    status = json.loads(accelkit("status", "--json", "--config", str(path)).stdout)
    assert [w["devices"] for w in status] == [{"cuda": ["cuda2"]}]
    assert accelkit("slurm", "epilog", "--config", str(path), env=env).returncode == 0
    assert json.loads(accelkit("status", "--json", "--config", str(path)).stdout) == []


def test_a_device_gone_since_gres_conf_was_written_fails_the_prolog(
    tmp_path: Path, config: Path
) -> None:
    out = tmp_path / "gres.conf"
    assert accelkit("slurm", "gres-conf", "--config", str(config), "--output",
                    str(out)).returncode == 0  # fmt: skip
    fewer = tmp_path / "fewer.toml"
    text = config.read_text()
    start = text.index('[[plugins.config.mock.kinds.devices]]\nid = "cuda3"')
    fewer.write_text(text[:start] + text[text.index("[[plugins", start + 10) :])
    env = {"SLURM_JOB_ID": "32", "SLURM_JOB_SLUID": "s32", "SLURM_JOB_GPUS": "0"}
    done = accelkit("slurm", "prolog", "--config", str(fewer), env=env)
    assert done.returncode == 2
    assert done.stderr == (
        "error: the gres.conf accelkit wrote lists gpu device cuda/cuda3, which this node no "
        "longer has; write it again with 'accelkit slurm gres-conf --output'\n"
    )


def test_the_prolog_script_asks_serve_and_falls_back_to_the_command(
    config: Path, tmp_path: Path
) -> None:
    out = tmp_path / "prolog"
    done = accelkit("slurm", "prolog-script", "--config", str(config), "--agent", "agent-1",
                    "--output", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert os.access(out, os.X_OK)
    assert f"sock={tmp_path}/state/slurm/prolog.sock\n" in text
    assert "http://accelkit/prolog?agent=agent-1" in text
    command = Path(ACCELKIT).resolve()
    assert text.endswith(
        f"exec {command} slurm prolog --config {config.resolve()} --agent agent-1\n"
    )
    # no serve: the command books (here it refuses: no SLURM_JOB_ID), with its error line
    bare = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    ran = subprocess.run(["sh", str(out)], env=bare, capture_output=True, text=True, check=False)
    assert ran.returncode == 2
    assert ran.stderr.startswith("error: SLURM_JOB_ID is '', not a job id")
    missing = accelkit("slurm", "prolog-script")
    assert missing.returncode == 2
    assert "--config is needed" in missing.stderr
