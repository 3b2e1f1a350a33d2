"""Bad-input cases of files and the environment: host config syntax, keys and types, mock
device files, and the ``ACCELKIT_*`` variables (see :mod:`bad_inputs`).
"""

from __future__ import annotations

from bad_inputs import HOST, Table, edited, under

table = Table()
case, config, devices = table.case, table.config, table.devices
CASES = table.cases

# ---------------------------------------------------------------------------- config: syntax
config("syntax/unclosed-table", "[resource\n", "line 1")
config("syntax/missing-value", "[resource]\nreserved-cpu =\n", "line 2")
config("syntax/duplicate-key", "[resource]\nreserved-cpu = 0\nreserved-cpu = 1\n", ":3")
config("syntax/duplicate-table", "[resource]\n[resource]\n", "resource")
config("syntax/bare-word", "[resource]\nreserved-mem = 1G\n", "line 2")
config("syntax/bom", "\ufeff" + HOST.replace('"state"', '"state"\nbogus = 1'), "bogus", issue=True)
config("syntax/nested-arrays-5000", "x = " + "[" * 5000 + "]" * 5000 + "\n", "deep", issue=True)
config(
    "syntax/nested-inline-tables-5000", "x = " + "{a = " * 5000 + "1" + "}" * 5000 + "\n", "deep"
)
config("syntax/dotted-key-5000", "[" + ".".join(["a"] * 5000) + "]\n", "a")
config("syntax/invalid-utf8", b'[resource]\nstate-dir = "\xff\xfe"\n', "UTF-8")
config("syntax/nul-byte", b"[resource]\x00\n", "line 1")
config("syntax/utf16", HOST.encode("utf-16"), "UTF-8")
config("syntax/huge-integer", "[resource]\nreserved-cpu = " + "9" * 5000 + "\n", ":2")
config("syntax/only-comment-and-junk", "# a host\n@@@\n", "line 2")

# ------------------------------------------------------------------- config: keys and types
config("keys/unknown-top-level", HOST + "[bogus]\nx = 1\n", "bogus")
config("keys/unknown-resource", under("[resource]", "bogus = 1"), "bogus")
config("keys/unknown-plugins", under("[plugins]", "bogus = 1"), "bogus")
config(
    "keys/unknown-agent",
    under('id = "agent-2"', "bogus = 1").replace('id = "agent-2"\nbogus', 'id = "agent-2"\nbogus'),
    "bogus",
)
config("keys/unknown-agents-entry", HOST + "bogus = 1\n", "bogus")
config(
    "keys/unknown-health", HOST.replace("[[agents]]", "[health]\nbogus = 1\n[[agents]]", 1), "bogus"
)
config("keys/unknown-bridge", HOST.replace("[[agents]]", "[bridge.bogus]\n[[agents]]", 1), "bogus")
config(
    "keys/unknown-bridge-k8s",
    HOST.replace("[[agents]]", "[bridge.k8s]\nbogus = 1\n[[agents]]", 1),
    "bogus",
)
config(
    "keys/unknown-bridge-slurm",
    HOST.replace("[[agents]]", "[bridge.slurm]\nbogus = 1\n[[agents]]", 1),
    "bogus",
)
config("keys/underscore-spelling", edited("reserved-cpu = 0", "reserved_cpu = 0"), "reserved_cpu")
config("keys/unknown-mock-key", under("[plugins.config.mock]", "bogus = 1"), "bogus")
config(
    "keys/unknown-plugin-section",
    HOST.replace("[[agents]]", "[plugins.config.nosuch]\nx = 1\n[[agents]]", 1),
    "nosuch",
    warns=True,
)
config(
    "keys/resource-not-a-table", HOST.replace("[resource]\n", "resource = 1\n[x]\n", 1), "resource"
)
config("keys/agents-not-an-array", "agents = 1\n", "agents")
config("keys/plugins-config-not-a-table", "[plugins]\nconfig = 1\n", "config")
config("keys/mock-section-not-a-table", "[plugins]\nconfig = { mock = 1 }\n", "mock")

R = "[resource]"
config("resource/mode-unknown", edited('"auto-split"', '"bogus"'), "allocation-mode", "bogus")
config("resource/mode-integer", edited('"auto-split"', "1"), "allocation-mode")
config("resource/mode-empty", edited('"auto-split"', '""'), "allocation-mode")
config(
    "resource/reserved-cpu-negative",
    edited("reserved-cpu = 0", "reserved-cpu = -1"),
    "reserved-cpu",
)
config(
    "resource/reserved-cpu-string", edited("reserved-cpu = 0", 'reserved-cpu = "x"'), "reserved-cpu"
)
config(
    "resource/reserved-cpu-float", edited("reserved-cpu = 0", "reserved-cpu = 1.5"), "reserved-cpu"
)
config(
    "resource/reserved-cpu-twice",
    edited("reserved-cpu = 0", 'reserved-cpu = ["0", "0"]'),
    "reserved-cpu",
)
config(
    "resource/reserved-cpu-empty-id",
    edited("reserved-cpu = 0", 'reserved-cpu = [""]'),
    "reserved-cpu",
)
config(
    "resource/reserved-cpu-unknown-core", edited("reserved-cpu = 0", 'reserved-cpu = ["99"]'), "99"
)
config(
    "resource/reserved-cpu-all",
    edited("reserved-cpu = 0", "reserved-cpu = 4"),
    "reserved-cpu",
    command="plan",
)
config(
    "resource/reserved-cpu-huge",
    edited("reserved-cpu = 0", "reserved-cpu = 9223372036854775807"),
    "reserved-cpu",
    command="plan",
)
config(
    "resource/reserved-cpu-bool", edited("reserved-cpu = 0", "reserved-cpu = true"), "reserved-cpu"
)
for label, value in (
    ("negative", '"-1G"'),
    ("fullwidth-digits", '"\uff11G"'),
    ("arabic-digits", '"\u0663G"'),
    ("empty", '""'),
    ("unit-only", '"G"'),
    ("two-dots", '"1.5.5G"'),
    ("unknown-unit", '"1Q"'),
    ("exponent", '"1e20"'),
    ("huge", '"99999999999999999999999999999T"'),
    ("float", "1.5"),
    ("bool", "true"),
    ("fraction-of-byte", '"0.5"'),
    ("nan", '"nan"'),
    ("array", '["1G"]'),
    ("more-than-node", '"9G"'),
):
    config(
        f"resource/reserved-mem-{label}",
        edited('reserved-mem = "0"', f"reserved-mem = {value}"),
        "reserved-mem",
        command="plan" if label == "more-than-node" else "check",
        issue=label == "fullwidth-digits",
    )
config("resource/align-zero", under(R, 'memory-align-size = "0"'), "memory-align-size")
config("resource/align-negative", under(R, "memory-align-size = -16"), "memory-align-size")
config(
    "resource/align-fullwidth", under(R, 'memory-align-size = "\uff11\uff16M"'), "memory-align-size"
)
config("resource/affinity-unknown", under(R, 'affinity-policy = "bogus"'), "affinity-policy")
config("resource/state-dir-empty", edited('state-dir = "state"', 'state-dir = ""'), "state-dir")
config("resource/state-dir-integer", edited('state-dir = "state"', "state-dir = 1"), "state-dir")
config("resource/state-dir-blank", edited('state-dir = "state"', 'state-dir = " "'), "state-dir")
config(
    "resource/state-dir-a-file",
    edited('state-dir = "state"', 'state-dir = "host.toml"'),
    "host.toml",
    command="status",
)
config("resource/numa-split-string", under(R, 'numa-aware-split = "yes"'), "numa-aware-split")
config("resource/pids-zero", under(R, "pids = 0"), "pids")
config("resource/pids-negative", under(R, "pids = -1"), "pids")
config("resource/pids-string", under(R, 'pids = "x"'), "pids")
config("resource/pids-huge", under(R, "pids = 9223372036854775807"), "pids")
config("resource/pids-float", under(R, "pids = 1.5"), "pids")

P = "[plugins]"
config("plugins/allowed-string", edited('allowed = ["mock"]', 'allowed = "mock"'), "allowed")
config("plugins/allowed-integers", edited('allowed = ["mock"]', "allowed = [1]"), "allowed")
config("plugins/allowed-empty-name", edited('allowed = ["mock"]', 'allowed = [""]'), "allowed")
config("plugins/blocked-integer", under(P, "blocked = 1"), "blocked")
config("plugins/strict-string", edited("strict = true", 'strict = "yes"'), "strict")
for key in ("call-timeout", "hook-timeout"):
    for label, value in (
        ("zero", "0"),
        ("negative", "-1"),
        ("string", '"x"'),
        ("inf", "inf"),
        ("nan", "nan"),
        ("huge", "1e300"),
        ("fullwidth", '"\uff13"'),
        ("empty", '""'),
    ):
        config(f"plugins/{key}-{label}", under(P, f"{key} = {value}"), key)
config(
    "plugins/allowed-unknown-strict",
    edited('allowed = ["mock"]', 'allowed = ["nosuch"]'),
    "nosuch",
    command="plugins",
    warns=True,
)

M = "[plugins.config.mock]"
# no mock device file to read: the error names the host config and the key
MOCK_FILE = {"names": ("host.toml", "plugins.config.mock.config-file")}
case(
    "mock/config-file-missing",
    "check",
    "--config",
    "{cfg}",
    **MOCK_FILE,
    files={"host.toml": edited('"devices.toml"', '"nosuch.toml"')},
)
case(
    "mock/config-file-directory",
    "check",
    "--config",
    "{cfg}",
    **MOCK_FILE,
    files={"host.toml": edited('"devices.toml"', '"."')},
)
case(
    "mock/config-file-empty",
    "check",
    "--config",
    "{cfg}",
    **MOCK_FILE,
    files={"host.toml": edited('"devices.toml"', '""')},
)
config("mock/config-file-integer", edited('"devices.toml"', "1"), "config-file")
for label, value in (
    ("zero", "0"),
    ("negative", "-1"),
    ("string", '"x"'),
    ("inf", "inf"),
    ("huge", "100000"),
):
    config(
        f"mock/health-interval-{label}", under(M, f"health-interval = {value}"), "health-interval"
    )
config("mock/gpu-metrics-string", under(M, 'gpu-metrics = "yes"'), "gpu-metrics")

config(
    "health/rediscover-zero", HOST + "[health]\nrediscover-interval = 0\n", "rediscover-interval"
)
config(
    "health/rediscover-negative",
    HOST + "[health]\nrediscover-interval = -5\n",
    "rediscover-interval",
)
config(
    "health/rediscover-string",
    HOST + '[health]\nrediscover-interval = "soon"\n',
    "rediscover-interval",
)
config(
    "health/rediscover-unit", HOST + '[health]\nrediscover-interval = "5s"\n', "rediscover-interval"
)
config("health/not-a-table", HOST.replace("[resource]", "health = 1\n[resource]", 1), "health")

K = "\n[bridge.k8s]\n"
for label, line, key in (
    ("domain-empty", 'domain = ""', "domain"),
    ("domain-spaces", 'domain = "my domain"', "domain"),
    ("domain-slash", 'domain = "a/b"', "domain"),
    ("domain-long", 'domain = "' + "a" * 300 + '.io"', "domain"),
    ("domain-integer", "domain = 1", "domain"),
    ("kubelet-dir-integer", "kubelet-dir = 1", "kubelet-dir"),
    ("release-interval-negative", "release-interval = -1", "release-interval"),
    ("admission-grace-string", 'admission-grace = "x"', "admission-grace"),
    ("kubelet-settle-inf", "kubelet-settle = inf", "kubelet-settle"),
):
    config(f"bridge-k8s/{label}", HOST + K + line + "\n", key)
S = "\n[bridge.slurm]\n"
for label, line, key in (
    ("gres-name-digit", 'gres-names = { cuda = "1gpu" }', "1gpu"),
    ("gres-name-space", 'gres-names = { cuda = "a gpu" }', "a gpu"),
    ("gres-name-empty", 'gres-names = { cuda = "" }', "gres-names"),
    ("gres-names-string", 'gres-names = "gpu"', "gres-names"),
    ("scontrol-empty", 'scontrol = ""', "scontrol"),
    ("scontrol-blank", 'scontrol = "  "', "scontrol"),
    ("resume-string", 'resume = "yes"', "resume"),
    ("serve-prologs-integer", "serve-prologs = 1", "serve-prologs"),
):
    config(f"bridge-slurm/{label}", HOST + S + line + "\n", key)

A2 = 'id = "agent-2"'
config("agents/id-empty", edited(A2, 'id = ""'), "id")
config("agents/id-integer", edited(A2, "id = 2"), "id")
config("agents/id-missing", edited(A2, 'name = "agent-2"'), "name")
config("agents/id-slash", edited(A2, 'id = "../agent"'), "../agent")
config("agents/id-space", edited(A2, 'id = "agent two"'), "agent two")
config("agents/id-newline", edited(A2, 'id = "agent\\n2"'), "id")
config("agents/id-twice", edited(A2, 'id = "agent-1"'), "agent-1")
config("agents/id-long", edited(A2, 'id = "' + "a" * 300 + '"'), "id")
config("agents/no-agent-table", HOST.replace('[agents.agent]\nid = "agent-2"\n', "", 1), "agent")
config(
    "agents/too-many",
    HOST + "".join(f'[[agents]]\n[agents.agent]\nid = "x{i}"\n' for i in range(3)),
    "x2",
    command="plan",
    warns=True,
)
config("agents/pids-zero", under(A2, "[agents.resource]\npids = 0"), "pids")
config(
    "agents/resource-cpu-auto", under(A2, '[agents.resource]\ncpu = ["0"]'), "cpu", command="plan"
)
MANUAL = edited('"auto-split"', '"manual"')


def manual(agent2: str) -> str:
    """MANUAL mode; agent-1 holds core 0, agent-2's resources are ``agent2``."""
    return MANUAL.replace(
        'id = "agent-1"\n', 'id = "agent-1"\n[agents.resource]\ncpu = ["0"]\n', 1
    ).replace(A2 + "\n", A2 + "\n[agents.resource]\n" + agent2 + "\n", 1)


config("manual/cpu-integer", manual("cpu = 4"), "cpu")
config("manual/cpu-empty", manual("cpu = []"), "cpu")
config("manual/cpu-unknown-core", manual('cpu = ["99"]'), "99", command="plan")
config("manual/cpu-held-twice", manual('cpu = ["0"]'), "0", command="plan")
config("manual/mem-string", manual('cpu = ["1"]\nmem = "lots"'), "mem")
config("manual/mem-fullwidth", manual('cpu = ["1"]\nmem = "\uff14G"'), "mem")
config("manual/mem-too-much", manual('cpu = ["1"]\nmem = "99T"'), "mem", command="plan")
config(
    "manual/devices-old-format", manual('cpu = ["1"]\ndevices = { "cuda.device" = 1 }'), "devices"
)
config(
    "manual/devices-unknown-id",
    manual('cpu = ["1"]\ndevices = { cuda = ["cuda9"] }'),
    "cuda9",
    command="plan",
)
config(
    "manual/devices-unknown-name",
    manual('cpu = ["1"]\ndevices = { npu = ["npu0"] }'),
    "npu",
    command="plan",
)
config("manual/devices-cpu-key", manual('devices = { cpu = ["1"] }'), "cpu")
config("manual/devices-not-table", manual('cpu = ["1"]\ndevices = ["cuda0"]'), "devices")

# ------------------------------------------------------------------------ mock device files
devices("syntax", "[[kinds]\n", "line 1")
devices("unknown-key", '[[kinds]]\nkey = "cpu"\nbogus = 1\n', "bogus")
devices(
    "memory-string", '[[kinds]]\nkey = "mem"\n[[kinds.devices]]\nid = "r"\nmemory = "x"\n', "memory"
)
devices(
    "memory-fullwidth",
    '[[kinds]]\nkey = "mem"\n[[kinds.devices]]\nid = "r"\nmemory = "\uff18G"\n',
    "memory",
)
devices(
    "numa-negative",
    '[[kinds]]\nkey = "cpu"\n[[kinds.devices]]\nid = "0"\nnuma-node = -1\n',
    "numa-node",
)
devices(
    "id-twice",
    '[[kinds]]\nkey = "cpu"\n[[kinds.devices]]\nid = "0"\n[[kinds.devices]]\nid = "0"\n',
    "0",
)
devices("kind-key-missing", '[[kinds]]\nallocation = "discrete"\n', "key")
devices("kind-key-bad", '[[kinds]]\nkey = "C P U"\n', "C P U")
devices("allocation-unknown", '[[kinds]]\nkey = "cpu"\nallocation = "bogus"\n', "bogus")
devices(
    "health-unknown",
    '[[kinds]]\nkey = "cpu"\n[[kinds.devices]]\nid = "0"\nhealth = "bogus"\n',
    "bogus",
)
devices("bom-and-unknown", '\ufeff[[kinds]]\nkey = "cpu"\nbogus = 1\n', "bogus")
devices("nested-5000", "x = " + "[" * 5000 + "]" * 5000 + "\n", "deep")

# ----------------------------------------------------------------------- environment variables
case("env/config-empty", "check", env={"ACCELKIT_CONFIG": ""}, names=("ACCELKIT_CONFIG",))
case(
    "env/config-missing",
    "check",
    env={"ACCELKIT_CONFIG": "{dir}/nosuch.toml"},
    names=("nosuch.toml",),
)
case("env/config-directory", "check", env={"ACCELKIT_CONFIG": "{dir}"}, names=("ACCELKIT_CONFIG",))
case(
    "env/config-bad-toml",
    "check",
    env={"ACCELKIT_CONFIG": "{dir}/bad.toml"},
    files={"bad.toml": "[resource\n"},
    names=("bad.toml",),
)
case("env/config-spaces", "check", env={"ACCELKIT_CONFIG": "   "}, names=("ACCELKIT_CONFIG",))
for command in ("status", "plan", "devices"):
    case(
        f"env/state-dir-empty/{command}",
        command,
        "--config",
        "{dir}/nostate.toml",
        env={"ACCELKIT_STATE_DIR": ""},
        files={"nostate.toml": HOST.replace('state-dir = "state"\n', "")},
        names=("ACCELKIT_STATE_DIR",),
        issue=command == "status",
    )
case(
    "env/state-dir-a-file",
    "status",
    "--config",
    "{dir}/nostate.toml",
    env={"ACCELKIT_STATE_DIR": "{dir}/devices.toml"},
    files={"nostate.toml": HOST.replace('state-dir = "state"\n', "")},
    names=("devices.toml",),
)
case(
    "env/state-dir-relative",
    "status",
    "--config",
    "{dir}/nostate.toml",
    env={"ACCELKIT_STATE_DIR": "relative/state"},
    files={"nostate.toml": HOST.replace('state-dir = "state"\n', "")},
    names=("ACCELKIT_STATE_DIR",),
)
for command in (
    "status",
    "repartition",
    "cordon cpu 0",
    "run --agent agent-1 --slots cpu=1 -- true",
):
    words = command.split()
    case(
        f"env/state-dir-cannot-be-made/{words[0]}",
        words[0],
        "--config",
        "{dir}/nostate.toml",
        *words[1:],
        env={"ACCELKIT_STATE_DIR": "/proc/1/accelkit"},
        files={"nostate.toml": HOST.replace('state-dir = "state"\n', "")},
        names=("/proc/1/accelkit",),
    )
for value in ("banana", "", "yes please", "2"):
    case(
        f"env/strict-plugins-{value or 'empty'}",
        "plan",
        "--config",
        "{cfg}",
        env={"ACCELKIT_STRICT_PLUGINS": value},
        names=("ACCELKIT_STRICT_PLUGINS",),
        issue=value == "banana",
    )
case(
    "env/disable-plugins-empty",
    "plan",
    "--config",
    "{cfg}",
    env={"ACCELKIT_DISABLE_PLUGINS": ""},
    names=("ACCELKIT_DISABLE_PLUGINS",),
)
case(
    "env/disable-plugins-unknown",
    "plan",
    "--config",
    "{cfg}",
    env={"ACCELKIT_DISABLE_PLUGINS": "nosuch"},
    names=("nosuch",),
)
case(
    "env/disable-plugins-separators",
    "plan",
    "--config",
    "{cfg}",
    env={"ACCELKIT_DISABLE_PLUGINS": ",,;"},
    names=("ACCELKIT_DISABLE_PLUGINS",),
)
case(
    "env/system-config-missing-is-defaults-but-config-empty",
    "status",
    "--config",
    " ",
    names=("--config",),
)
