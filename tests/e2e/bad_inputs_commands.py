"""Bad-input cases of the command line: commands and options, ``--config`` for every command,
``plan``, ``run --slots``, durations, ``--listen``, agents, ``release`` and ``cordon``
(see :mod:`bad_inputs`).
"""

from __future__ import annotations

from bad_inputs import HOST, Table

table = Table()
case, config, devices = table.case, table.config, table.devices
CASES = table.cases

# ---------------------------------------------------------------------------------------- CLI
case("cli/unknown-command", "bogus", names=("bogus",))
case("cli/unknown-option", "--bogus", names=("--bogus",))
case("cli/unknown-command-option", "status", "--bogus", names=("--bogus",))
case("cli/extra-argument", "status", "--config", "{cfg}", "extra", names=("extra",))
case("cli/slurm-unknown-subcommand", "slurm", "bogus", names=("bogus",))
case("cli/option-without-value", "status", "--config", names=("--config",))

# every command that reads a host config: a missing file, a directory, an empty path
CONFIG_COMMANDS = (
    "check",
    "plugins",
    "devices",
    "plan",
    "metrics",
    "status",
    "repartition",
    "cordon cpu 0",
    "uncordon cpu 0",
    "run --agent agent-1 --slots cpu=1 -- true",
    "release nosuch",
    "cdi --agent agent-1",
    "serve",
    "serve-metrics --port 0",
    "k8s-device-plugin --agent agent-1",
    "dra-driver --agent agent-1",
    "slurm gres-conf",
    "slurm node-line",
    "slurm prolog --agent agent-1",
    "slurm prolog-script --agent agent-1",
    "slurm task-prolog",
    "slurm task-prolog-script",
    "slurm epilog",
)


def _with_config(command: str, value: str) -> tuple[str, ...]:
    words = command.split()
    split = 2 if words[0] == "slurm" else 1
    return (*words[:split], "--config", value, *words[split:])


for command in CONFIG_COMMANDS:
    tag = command.split(" --")[0].replace(" ", "-")
    case(
        f"config-path/{tag}/missing",
        *_with_config(command, "{dir}/nosuch.toml"),
        names=("nosuch.toml",),
    )
    case(f"config-path/{tag}/directory", *_with_config(command, "{dir}"), names=("--config",))
    case(f"config-path/{tag}/empty", *_with_config(command, ""), names=("--config",), issue=True)

case(
    "config-path/unreadable-bytes",
    "check",
    "--config",
    "{dir}/bad.toml",
    names=("bad.toml",),
    files={"bad.toml": b"\xff\xfe\x00[resource\x00"},
)
case("config-path/dev-null", "check", "--config", "/dev/null", names=("/dev/null",))

# ------------------------------------------------------------------------------------- plan
PLAN = ("plan", "--config", "{cfg}")
for label, value in (
    ("zero", "0"),
    ("negative", "-1"),
    ("3000", "3000"),
    ("1e20", "1e20"),
    ("word", "x"),
    ("empty", ""),
    ("fullwidth", "\uff13"),
    ("float", "1.5"),
    ("huge", "9" * 40),
):
    case(
        f"plan/agents-{label}",
        *PLAN,
        "--agents",
        value,
        names=("--agents",),
        issue=label in ("3000", "1e20"),
    )
case("plan/mode-unknown", *PLAN, "--mode", "bogus", names=("--mode",))
case("plan/mode-empty", *PLAN, "--mode", "", names=("--mode",))
case(
    "plan/manual-without-agents",
    "plan",
    "--config",
    "{dir}/m.toml",
    "--mode",
    "manual",
    files={"m.toml": HOST.split("[[agents]]")[0]},
    names=("manual",),
)  # one agent: warned

# ------------------------------------------------------------------------------- run --slots
RUN = ("run", "--config", "{cfg}", "--agent", "agent-1")
for label, value, names in (
    ("empty", "", ("--slots",)),
    ("no-equals", "cpu", ("cpu",)),
    ("no-name", "=1", ("--slots",)),
    ("no-amount", "cpu=", ("cpu",)),
    ("double-comma", "cpu=1,,mem=1G", ("--slots",)),
    ("twice", "cpu=1,cpu=1", ("cpu",)),
    ("unknown-slot", "nosuch=1", ("nosuch",)),
    ("zero", "cpu=0", ("cpu",)),
    ("negative", "cpu=-1", ("cpu",)),
    ("word", "cpu=x", ("cpu",)),
    ("fraction-of-whole", "cpu=1.5", ("cpu",)),
    ("cuda-fraction", "cuda.device=0.5", ("cuda.device",)),
    ("fullwidth-count", "cpu=\uff11", ("cpu",)),
    ("arabic-count", "cpu=\u0663", ("cpu",)),
    ("inf", "cpu=inf", ("cpu",)),
    ("nan", "cpu=nan", ("cpu",)),
    ("exponent", "cpu=1e3", ("cpu",)),
    ("too-many", "cpu=3", ("cpu",)),
    ("huge", "cpu=" + "9" * 40, ("cpu",)),
    ("mem-negative", "mem=-1G", ("mem",)),
    ("mem-fullwidth", "mem=\uff11G", ("mem",)),
    ("mem-unit", "mem=1Q", ("mem",)),
    ("mem-huge", "mem=99999999999999999999T", ("mem",)),
    ("mem-too-much", "mem=5G", ("mem",)),
    ("mem-empty", "mem=", ("mem",)),
    ("semicolon", "cpu=1;mem=1G", ("--slots",)),
):
    case(
        f"run/slots-{label}",
        *RUN,
        "--slots",
        value,
        "--",
        "true",
        names=names,
        issue=label == "fullwidth-count",
    )
for label, value in (
    ("negative", "-1"),
    ("word", "x"),
    ("empty", ""),
    ("inf", "inf"),
    ("nan", "nan"),
    ("exponent", "1e999"),
    ("fullwidth", "\uff15"),
    ("too-long", "100000"),
    ("unit", "5s"),
):
    case(
        f"run/grace-{label}",
        *RUN,
        "--slots",
        "cpu=1",
        "--grace",
        value,
        "--",
        "true",
        names=("--grace",),
    )
for label, value in (
    ("zero", "0"),
    ("negative", "-1"),
    ("word", "x"),
    ("huge", "9" * 30),
    ("fullwidth", "\uff11\uff10"),
):
    case(
        f"run/pids-{label}",
        *RUN,
        "--slots",
        "cpu=1",
        "--pids",
        value,
        "--",
        "true",
        names=("--pids",),
    )
case(
    "run/runtime-unknown",
    *RUN,
    "--slots",
    "cpu=1",
    "--runtime",
    "bogus",
    "--",
    "true",
    names=("bogus",),
)
case(
    "run/runtime-empty",
    *RUN,
    "--slots",
    "cpu=1",
    "--runtime",
    "",
    "--",
    "true",
    names=("--runtime",),
)
case(
    "run/image-with-process-runtime",
    *RUN,
    "--slots",
    "cpu=1",
    "--image",
    "busybox",
    "--",
    "true",
    names=("--image",),
)
case(
    "run/image-empty",
    *RUN,
    "--slots",
    "cpu=1",
    "--image",
    "",
    "--",
    "true",
    names=("--image",),
)
case(
    "run/image-empty-docker",
    *RUN,
    "--slots",
    "cpu=1",
    "--runtime",
    "docker",
    "--image",
    " ",
    "--",
    "true",
    names=("--image",),
)
case(
    "run/docker-without-image",
    *RUN,
    "--slots",
    "cpu=1",
    "--runtime",
    "docker",
    "--",
    "true",
    names=("--image",),
)
case(
    "run/agent-unknown",
    "run",
    "--config",
    "{cfg}",
    "--agent",
    "nosuch",
    "--slots",
    "cpu=1",
    "--",
    "true",
    names=("nosuch",),
)
case(
    "run/agent-empty",
    "run",
    "--config",
    "{cfg}",
    "--agent",
    "",
    "--slots",
    "cpu=1",
    "--",
    "true",
    names=("--agent|agent ''",),
)
case(
    "run/agent-left-out-two-agents",
    "run",
    "--config",
    "{cfg}",
    "--slots",
    "cpu=1",
    "--",
    "true",
    names=("--agent",),
)
case("run/no-command", *RUN, "--slots", "cpu=1", names=("COMMAND",))
case(
    "run/command-not-found",
    *RUN,
    "--slots",
    "cpu=1",
    "--",
    "/nosuch/command",
    names=("/nosuch/command",),
)
case("run/command-a-directory", *RUN, "--slots", "cpu=1", "--", "{dir}", names=("{dir}",))

# -------------------------------------------------------------------------------- durations
for label, value in (
    ("zero", "0"),
    ("negative", "-1"),
    ("word", "x"),
    ("empty", ""),
    ("inf", "inf"),
    ("nan", "nan"),
    ("fullwidth", "\uff12"),
    ("too-long", "1e9"),
):
    case(
        f"metrics/watch-{label}",
        "metrics",
        "--config",
        "{cfg}",
        "--watch",
        value,
        names=("--watch",),
    )
    case(
        f"serve/rediscover-interval-{label}",
        "serve",
        "--config",
        "{cfg}",
        "--rediscover-interval",
        value,
        names=("--rediscover-interval",),
    )
    if label != "zero":  # no grace: SIGKILL at once
        case(
            f"release/grace-{label}",
            "release",
            "--config",
            "{cfg}",
            "--grace",
            value,
            "nosuch",
            names=("--grace",),
        )
    case(
        f"dra-driver/interval-{label}",
        "dra-driver",
        "--config",
        "{cfg}",
        "--agent",
        "agent-1",
        "--interval",
        value,
        names=("--interval",),
    )
case(
    "metrics/json-and-prometheus",
    "metrics",
    "--config",
    "{cfg}",
    "--json",
    "--prometheus",
    names=("--json", "--prometheus"),
)

# ---------------------------------------------------------------------------------- --listen
for label, value in (
    ("empty", ""),
    ("word", "x"),
    ("no-port", "127.0.0.1"),
    ("not-loopback", "192.0.2.1:9400"),
    ("any-address", "0.0.0.0:9400"),
    ("ipv6-any", "[::]:9400"),
    ("port-too-big", "127.0.0.1:99999"),
    ("port-negative", "127.0.0.1:-1"),
    ("port-word", "127.0.0.1:http"),
    ("port-fullwidth", "127.0.0.1:\uff19\uff14\uff10\uff10"),
    ("ipv6-unbracketed", "::1:9400"),
    ("ipv6-unclosed", "[::1:9400"),
    ("ipv6-no-port", "[::1]"),
    ("host-name", "example.com:9400"),
):
    case(
        f"serve/listen-{label}",
        "serve",
        "--config",
        "{cfg}",
        "--listen",
        value,
        names=("--listen",),
    )
for label, value in (
    ("negative", "-1"),
    ("too-big", "65536"),
    ("word", "x"),
    ("empty", ""),
    ("fullwidth", "\uff18\uff10"),
):
    case(
        f"serve-metrics/port-{label}",
        "serve-metrics",
        "--config",
        "{cfg}",
        "--port",
        value,
        names=("--port",),
    )

# ------------------------------------------------------------------------- agents by command
AGENT_COMMANDS = (
    ("cdi", ("cdi", "--config", "{cfg}")),
    ("status", ("status", "--config", "{cfg}")),
    ("release", ("release", "--config", "{cfg}", "nosuch")),
    ("k8s-device-plugin", ("k8s-device-plugin", "--config", "{cfg}", "--kubelet-dir", "{dir}")),
    ("dra-driver", ("dra-driver", "--config", "{cfg}")),
    ("slurm-gres-conf", ("slurm", "gres-conf", "--config", "{cfg}")),
    ("slurm-node-line", ("slurm", "node-line", "--config", "{cfg}")),
    ("slurm-prolog", ("slurm", "prolog", "--config", "{cfg}")),
    ("slurm-prolog-script", ("slurm", "prolog-script", "--config", "{cfg}")),
)
for tag, args in AGENT_COMMANDS:
    case(
        f"agent/{tag}/unknown",
        *args,
        "--agent",
        "nosuch",
        names=("nosuch",),
        env={"SLURM_JOB_ID": "7"},
    )
    case(
        f"agent/{tag}/empty",
        *args,
        "--agent",
        "",
        names=("--agent|agent ''",),
        env={"SLURM_JOB_ID": "7"},
    )
    case(
        f"agent/{tag}/path",
        *args,
        "--agent",
        "../agent-1",
        names=("../agent-1",),
        env={"SLURM_JOB_ID": "7"},
    )
for tag, args in (
    ("cdi", ("cdi", "--config", "{cfg}")),
    ("dra-driver", ("dra-driver", "--config", "{cfg}")),
    ("k8s-device-plugin", ("k8s-device-plugin", "--config", "{cfg}")),
    ("slurm-prolog", ("slurm", "prolog", "--config", "{cfg}")),
):
    case(f"agent/{tag}/left-out-two-agents", *args, names=("--agent",), env={"SLURM_JOB_ID": "7"})

# ------------------------------------------------------------------ release, cordon, uncordon
REL = ("release", "--config", "{cfg}")
case("release/unknown-id", *REL, "nosuch", names=("nosuch",))
case("release/empty-id", *REL, "", names=("WORKLOAD|workload ''",))
case("release/path-id", *REL, "../../etc", names=("../../etc",))
case("release/spaces-id", *REL, "  ", names=("WORKLOAD|workload '  '",))
case("release/no-id", *REL, names=("WORKLOAD",))
case("release/two-ids", *REL, "a", "b", names=("b",))
case("release/newline-id", *REL, "a\nb", names=("workload 'a\\nb'",))
for command in ("cordon", "uncordon"):
    base = (command, "--config", "{cfg}")
    case(f"{command}/unknown-plugin", *base, "nosuch", "0", names=("nosuch",))
    case(f"{command}/unknown-device", *base, "cpu", "99", names=("99",))
    case(f"{command}/empty-plugin", *base, "", "0", names=("PLUGIN|plugin ''",))
    case(f"{command}/empty-device", *base, "cpu", "", names=("DEVICE|device ''",))
    case(f"{command}/no-device", *base, "cpu", names=("DEVICE",))
case(
    "cordon/newline-reason",
    "cordon",
    "--config",
    "{cfg}",
    "--reason",
    "a\nb",
    "cpu",
    "0",
    names=("reason",),
)
