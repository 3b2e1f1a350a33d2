"""Bad-input cases of what commands write and serve: ``--output`` paths, ``cdi``,
``new-plugin``, the Slurm bridge and its job environment, Kubernetes and DRA options, and sizes
that must read right (see :mod:`bad_inputs`).
"""

from __future__ import annotations

from bad_inputs import Table

table = Table()
case, config, devices = table.case, table.config, table.devices
CASES = table.cases

# ----------------------------------------------------------------------------- output paths
CDI = ("cdi", "--config", "{cfg}", "--agent", "agent-1")
case("cdi/output-missing-parents", *CDI, "--output", "{dir}/a/b/c", names=("a/b/c",), issue=True)
case("cdi/output-a-file", *CDI, "--output", "{cfg}", names=("--output",))
case("cdi/output-unwritable", *CDI, "--output", "/proc/1", names=("/proc/1",))
case("cdi/output-empty", *CDI, "--output", "", names=("--output",))
for label, value in (
    ("empty", ""),
    ("no-class", "vendor.com"),
    ("two-slashes", "a.com/b/c"),
    ("spaces", "a b.com/c"),
    ("upper-class", "vendor.com/Bad!"),
):
    case(f"cdi/kind-{label}", *CDI, "--kind", value, names=("--kind",))
case("cdi/replace-without-output", *CDI, "--replace", names=("--replace",))

NP = ("new-plugin",)
case(
    "new-plugin/output-missing-parents",
    *NP,
    "npu",
    "--output",
    "{dir}/a/b/c",
    names=("a/b/c",),
    issue=True,
)
case("new-plugin/output-a-file", *NP, "npu", "--output", "{cfg}", names=("--output",))
case("new-plugin/output-unwritable", *NP, "npu", "--output", "/proc/1", names=("/proc/1",))
case("new-plugin/output-empty", *NP, "npu", "--output", "", names=("--output",))
case(
    "new-plugin/target-exists",
    *NP,
    "npu",
    "--output",
    "{dir}",
    names=("accelkit-npu",),
    files={"accelkit-npu/x": "x"},
)
for label, value in (
    ("empty", ""),
    ("space", "my npu"),
    ("digit-first", "1npu"),
    ("slash", "a/b"),
    ("dots", ".."),
    ("upper", "NPU"),
    ("long", "n" * 300),
    ("unicode", "\uff4e\uff50\uff55"),
    ("core-name", "cpu"),
    ("shipped-cuda", "cuda"),
    ("shipped-mock", "mock"),
):
    case(f"new-plugin/name-{label}", *NP, value, "--output", "{dir}", names=("plugin name",))

SL = ("slurm",)
for sub in ("gres-conf", "prolog-script", "task-prolog-script"):
    agent = ("--agent", "agent-1") if sub == "prolog-script" else ()
    base = (*SL, sub, "--config", "{cfg}", *agent)
    case(f"slurm/{sub}/output-missing-parents", *base, "--output", "{dir}/a/b/c", names=("a/b/c",))
    case(f"slurm/{sub}/output-directory", *base, "--output", "{dir}", names=("--output",))
    case(f"slurm/{sub}/output-unwritable", *base, "--output", "/proc/1/x", names=("/proc/1/x",))
    case(f"slurm/{sub}/output-empty", *base, "--output", "", names=("--output",))
for sub in ("gres-conf", "node-line"):
    for label, value in (
        ("empty", ""),
        ("space", "node 1"),
        ("comma", "a,b"),
        ("newline", "a\nb"),
        ("brackets", "node[1-2"),
    ):
        case(
            f"slurm/{sub}/node-name-{label}",
            *SL,
            sub,
            "--config",
            "{cfg}",
            "--node-name",
            value,
            names=("--node-name",),
        )

JOB = ("slurm", "prolog", "--config", "{cfg}", "--agent", "agent-1")
case("slurm/prolog/no-job-id", *JOB, names=("SLURM_JOB_ID",))
case("slurm/prolog/job-id-word", *JOB, env={"SLURM_JOB_ID": "abc"}, names=("SLURM_JOB_ID",))
case("slurm/prolog/job-id-empty", *JOB, env={"SLURM_JOB_ID": ""}, names=("SLURM_JOB_ID",))
case(
    "slurm/prolog/job-id-fullwidth",
    *JOB,
    env={"SLURM_JOB_ID": "\uff11\uff12"},
    names=("SLURM_JOB_ID",),
)
case("slurm/prolog/job-id-negative", *JOB, env={"SLURM_JOB_ID": "-1"}, names=("SLURM_JOB_ID",))
case(
    "slurm/prolog/job-gpus-word",
    *JOB,
    env={"SLURM_JOB_ID": "7", "SLURM_JOB_GPUS": "x"},
    names=("SLURM_JOB_GPUS",),
)
case(
    "slurm/prolog/job-gpus-out-of-range",
    *JOB,
    env={"SLURM_JOB_ID": "7", "SLURM_JOB_GPUS": "99"},
    names=("99",),
)
case(
    "slurm/prolog/job-gpus-fullwidth",
    *JOB,
    env={"SLURM_JOB_ID": "7", "SLURM_JOB_GPUS": "\uff10"},
    names=("SLURM_JOB_GPUS",),
)
EPI = ("slurm", "epilog", "--config", "{cfg}")
case("slurm/epilog/no-job-id", *EPI, names=("SLURM_JOB_ID",))
case("slurm/epilog/job-id-word", *EPI, env={"SLURM_JOB_ID": "abc"}, names=("SLURM_JOB_ID",))
case("slurm/epilog/job-id-empty", *EPI, env={"SLURM_JOB_ID": ""}, names=("SLURM_JOB_ID",))
TASK = ("slurm", "task-prolog", "--config", "{cfg}")
case("slurm/task-prolog/no-job-id", *TASK, names=("SLURM_JOB_ID",))
case("slurm/task-prolog/job-id-word", *TASK, env={"SLURM_JOB_ID": "abc"}, names=("SLURM_JOB_ID",))

# ------------------------------------------------------------------------------- kubernetes
K8S = ("k8s-device-plugin", "--config", "{cfg}", "--agent", "agent-1")
# a kubelet directory not there yet is waited for, with a warning (the bridge's own tests)
case(
    "k8s-device-plugin/kubelet-dir-a-file", *K8S, "--kubelet-dir", "{cfg}", names=("--kubelet-dir",)
)
case("k8s-device-plugin/kubelet-dir-empty", *K8S, "--kubelet-dir", "", names=("--kubelet-dir",))
for label, value in (
    ("empty", ""),
    ("space", "my domain"),
    ("slash", "a/b"),
    ("upper", "UPPER.IO"),
    ("long", "a" * 300 + ".io"),
):
    case(
        f"k8s-device-plugin/domain-{label}",
        *K8S,
        "--kubelet-dir",
        "{dir}",
        "--domain",
        value,
        names=("--domain",),
    )
DRA = ("dra-driver", "--config", "{cfg}", "--agent", "agent-1")
for label, value in (
    ("empty", ""),
    ("space", "my driver"),
    ("underscore", "bad_name.io"),
    ("upper", "BAD.IO"),
    ("long", "d" * 300 + ".io"),
):
    case(f"dra-driver/driver-{label}", *DRA, "--driver", value, names=("--driver",))
for label, value in (("empty", ""), ("space", "node 1"), ("upper", "Node1"), ("long", "n" * 300)):
    case(f"dra-driver/node-name-{label}", *DRA, "--node-name", value, names=("--node-name",))
case(
    "dra-driver/kubeconfig-missing",
    *DRA,
    "--node-name",
    "n1",
    "--kubeconfig",
    "{dir}/nosuch.yaml",
    names=("nosuch.yaml",),
)
case(
    "dra-driver/kubeconfig-directory",
    *DRA,
    "--node-name",
    "n1",
    "--kubeconfig",
    "{dir}",
    names=("{dir}",),
)
case(
    "dra-driver/kubeconfig-garbage",
    *DRA,
    "--node-name",
    "n1",
    "--kubeconfig",
    "{dir}/kc.yaml",
    files={"kc.yaml": "{{{ not yaml"},
    names=("kc.yaml",),
)
case(
    "dra-driver/kubeconfig-empty-file",
    *DRA,
    "--node-name",
    "n1",
    "--kubeconfig",
    "{dir}/kc.yaml",
    files={"kc.yaml": ""},
    names=("kc.yaml",),
)
case(
    "dra-driver/kubeconfig-env-missing",
    *DRA,
    "--node-name",
    "n1",
    env={"KUBECONFIG": "{dir}/nosuch.yaml"},
    names=("nosuch.yaml",),
)
for label, value in (("empty", ""), ("space", "node 1"), ("upper", "Node1")):
    case(f"dra-driver/node-name-env-{label}", *DRA, env={"NODE_NAME": value}, names=("NODE_NAME",))
for opt in ("--registry-dir", "--plugins-dir", "--cdi-dir"):
    case(f"dra-driver/{opt[2:]}-a-file", *DRA, opt, "{cfg}", names=(opt,))
    case(f"dra-driver/{opt[2:]}-empty", *DRA, opt, "", names=(opt,))

# ------------------------------------------------------------------- values that must read right
case(
    "sizes/1GB-is-decimal",
    "devices",
    "--config",
    "{cfg}",
    "--json",
    files={
        "devices.toml": '[[kinds]]\nkey = "mem"\n[[kinds.devices]]\nid = "root"\nmemory = "1GB"\n'
    },
    stdout_has="1000000000",
    issue=True,
)
