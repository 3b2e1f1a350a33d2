"""The task prolog as a POSIX ``sh`` + ``awk`` script: no Python start before each task.

The prolog keeps, per job, a tab-separated file (:mod:`.task_views`) that says which devices
the job holds under which GRES index and how each plugin variable is made of its devices. The
script reads which of them Slurm bound to this task and step, and prints ``export`` lines for
exactly those and ``unset`` lines for the rest:

- ``gpu`` (``source gpu``): ``SLURM_STEP_GPUS`` (narrowed per task by ``--gpus-per-task`` and
  ``--gpu-bind``), else Slurm's numeric ``GPU_DEVICE_ORDINAL`` or ``CUDA_VISIBLE_DEVICES``;
  indices the job does not hold are read as positions in the job's list (Slurm numbers them
  from 0 when it constrains devices); none of them: no GPU;
- other names (``source scontrol``): ``scontrol show step -d JOB.STEP``, its ``(IDX:...)``
  where Slurm prints one, else the step's ``TresPer*`` count when it is the job's whole count;
  a smaller count whose indices Slurm does not tell gets none (never more than Slurm bound);
- the batch step holds the job's whole allocation on the node.

:func:`script` bakes the state directory and ``scontrol`` into the text.
"""

from __future__ import annotations

import shlex

__all__ = ["AWK", "script"]

AWK = r"""
function fail(msg) { print "error: " msg > "/dev/stderr"; failed = 1; exit 2 }
function note(msg) { print "accelkit task prolog: " msg > "/dev/stderr" }
function expand(text, out,    parts, k, lo, hi, r, m, j) {
    # "0-2,5" -> out[1..m]; m, or -1 when text is not an index list
    m = 0
    k = split(text, parts, ",")
    for (j = 1; j <= k; j++) {
        if (parts[j] == "") continue
        if (parts[j] ~ /^[0-9]+$/) { out[++m] = parts[j] + 0; continue }
        if (parts[j] !~ /^[0-9]+-[0-9]+$/) return -1
        split(parts[j], r, "-"); lo = r[1] + 0; hi = r[2] + 0
        if (hi < lo || hi - lo > 65536) return -1
        for (; lo <= hi; lo++) out[++m] = lo
    }
    return m
}
function pick(n, text, what,    got, m, j, held, small) {
    m = expand(text, got)
    if (m < 0) { note(what " is " text ", not an index list: no " n " for this task"); return }
    held = 1; small = 1
    for (j = 1; j <= m; j++) {
        if (!((n, got[j]) in booked)) held = 0
        if (got[j] >= ndev[n]) small = 0
    }
    if (held) { for (j = 1; j <= m; j++) sel[n, got[j]] = 1; return }
    if (small) { for (j = 1; j <= m; j++) sel[n, index_at[n, got[j] + 1]] = 1; return }
    note(what " " text " names " n " the job does not hold: no " n " for this task")
}
function whole(n,    j) { for (j = 1; j <= ndev[n]; j++) sel[n, index_at[n, j]] = 1 }
function from_env(n,    v) {
    if ("SLURM_STEP_GPUS" in ENVIRON) {
        pick(n, ENVIRON["SLURM_STEP_GPUS"], "SLURM_STEP_GPUS"); return
    }
    v = ENVIRON["GPU_DEVICE_ORDINAL"]
    if (v ~ /^[0-9][0-9,-]*$/) { pick(n, v, "GPU_DEVICE_ORDINAL"); return }
    v = ENVIRON["CUDA_VISIBLE_DEVICES"]
    if (v ~ /^[0-9][0-9,-]*$/) pick(n, v, "CUDA_VISIBLE_DEVICES")
}
function from_step(n,    text, rest, entry, got, want, c, k, t) {
    text = ENVIRON["ACCELKIT_STEP"]
    rest = text
    while (match(rest, /[A-Za-z][A-Za-z0-9_.-]*(:[^:(\t\n ,]*)*\(IDX:[0-9,-]*\)/)) {
        entry = substr(rest, RSTART, RLENGTH); rest = substr(rest, RSTART + RLENGTH)
        split(entry, got, /[:(]/)
        if (got[1] != n) continue
        sub(/.*\(IDX:/, "", entry); sub(/\)$/, "", entry)
        pick(n, entry, "the step's IDX"); return
    }
    want = 0; rest = text
    while (match(rest, /gres[:\/][A-Za-z][A-Za-z0-9_.-]*(:[A-Za-z0-9_.-]+)?[:=][0-9]+/)) {
        entry = substr(rest, RSTART + 5, RLENGTH - 5); rest = substr(rest, RSTART + RLENGTH)
        k = split(entry, got, /[:=]/)
        if (got[1] == n) { c = got[k] + 0; if (c > want) want = c }
    }
    if (want == 0) return
    if (want >= ndev[n]) { whole(n); return }
    note("the step has " want " of the job's " ndev[n] " " n \
        " and Slurm does not say which: none exported")
}
BEGIN { FS = "\t"; batch = !("SLURM_STEP_ID" in ENVIRON) || ENVIRON["SLURM_STEP_ID"] == "batch" }
NR == 1 && $0 != "accelkit-slurm-job\t1" { fail(FILENAME " is not a job file of this accelkit") }
$1 == "N" { src[$2] = $3; names[$2] = 1; next }
$1 == "D" { ndev[$2]++; index_at[$2, ndev[$2]] = $3; booked[$2, $3 + 0] = 1; next }
$1 == "E" { nv++; var[nv] = $2; kind[$2] = $3; jobval[$2] = $4; next }
$1 == "O" { no[$2]++; oname[$2, no[$2]] = $3; oidx[$2, no[$2]] = $4; oval[$2, no[$2]] = $5; next }
END {
    if (failed) exit 2
    for (n in names) {
        if (batch) whole(n)
        else if (src[n] == "gpu") from_env(n)
        else from_step(n)
    }
    for (k = 1; k <= nv; k++) {
        v = var[k]; out = ""; chosen = 0
        for (j = 1; j <= no[v]; j++)
            if ((oname[v, j], oidx[v, j]) in sel) {
                chosen++; out = out (out == "" ? "" : ",") oval[v, j]
            }
        if (kind[v] == "list" && chosen) print "export " v "=" out
        else if (kind[v] == "same" && chosen) print "export " v "=" jobval[v]
        else if (kind[v] == "whole" && chosen == no[v] && chosen) print "export " v "=" jobval[v]
        else print "unset " v
    }
}
"""

_BODY = """\
[ -n "${SLURM_JOB_ID:-}" ] || {
    echo "error: SLURM_JOB_ID is unset: run this as Slurm's TaskProlog" >&2; exit 2; }
case $SLURM_JOB_ID in *[!0-9]*)
    echo "error: SLURM_JOB_ID is '$SLURM_JOB_ID', not a job id" >&2; exit 2;; esac
file=$state/slurm/$SLURM_JOB_ID.env
[ -e "$file" ] || exit 0
[ -r "$file" ] || { echo "error: cannot read $file" >&2; exit 2; }
ACCELKIT_STEP=
case ${SLURM_STEP_ID:-batch} in batch) ;; *)
    if grep -q '^N	[^	]*	scontrol$' "$file"; then
        ACCELKIT_STEP=$("$scontrol" show step -d "$SLURM_JOB_ID.$SLURM_STEP_ID" 2>&1) ||
            echo "accelkit task prolog: $scontrol show step failed: $ACCELKIT_STEP" >&2
    fi;;
esac
export ACCELKIT_STEP
exec awk "$program" "$file"
"""


def script(state_dir: str, scontrol: str, slurm_conf: str | None = None) -> str:
    """The task prolog for a node whose accelkit state is in ``state_dir``."""
    conf = f"export SLURM_CONF={shlex.quote(slurm_conf)}\n" if slurm_conf else ""
    return (
        "#!/bin/sh\n"
        "# Slurm TaskProlog of accelkit (from 'accelkit slurm task-prolog-script'): exports the\n"
        "# plugin variables of the devices Slurm bound to this task and step, unsets the rest.\n"
        f"state={shlex.quote(state_dir)}\n"
        f"scontrol={shlex.quote(scontrol)}\n"
        f"{conf}"
        f"program={shlex.quote(AWK)}\n"
        f"{_BODY}"
    )
