"""Which GRES indices Slurm allocated to a job, from the prolog's environment or ``scontrol``.

For GRES ``gpu`` Slurm sets ``SLURM_JOB_GPUS`` (``0,2``) in the prolog. For any other name it
sets no index variable: ``scontrol show job -d ID`` lists them per node, as in
``Nodes=n1 CPU_IDs=0-1 Mem=0 GRES=tpu:acme:2(IDX:0-1),gpu:1(IDX:3)``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from accelkit.errors import InvalidResourceArgument
from accelkit.types import is_digits

__all__ = ["gpu_indices", "index_list", "scontrol_indices"]

_NODE_LINE = re.compile(r"^\s*Nodes=(\S+)\s.*?\bGRES=(\S+)", re.MULTILINE)
_ENTRY = re.compile(r"([A-Za-z][\w.-]*)(?::[^:(\s,]*)*\(IDX:([\d,-]*)\)")


#: more indices than any node has devices: a list naming more is refused before it is expanded
MAX_INDICES = 1 << 16


def index_list(text: str) -> list[int]:
    """``0-1,3`` as ``[0, 1, 3]``; ``InvalidResourceArgument`` for anything else."""
    found: set[int] = set()
    for part in filter(None, text.strip().split(",")):
        low, sep, high = part.partition("-")
        if not is_digits(low) or (sep and not is_digits(high)):
            msg = f"not a GRES index list: {text!r}"
            raise InvalidResourceArgument(msg)
        first, last = int(low), int(high) if sep else int(low)
        if last < first:
            msg = f"not a GRES index list: {text!r}"
            raise InvalidResourceArgument(msg)
        if last >= MAX_INDICES:
            most = MAX_INDICES - 1
            msg = f"not a GRES index list: {text[:80]!r} names index {last:,} (at most {most:,})"
            raise InvalidResourceArgument(msg)
        found.update(range(first, last + 1))
    return sorted(found)


def gpu_indices(env: Mapping[str, str]) -> list[int]:
    """The job's ``gpu`` indices on this node (none when ``SLURM_JOB_GPUS`` is unset)."""
    try:
        return index_list(env.get("SLURM_JOB_GPUS", ""))
    except InvalidResourceArgument as exc:
        msg = f"SLURM_JOB_GPUS: {exc}"
        raise InvalidResourceArgument(msg) from None


def scontrol_indices(text: str, node_name: str | None) -> dict[str, list[int]]:
    """Per GRES name, the indices ``scontrol show job -d`` lists for ``node_name``.

    Without a node name, or when no line names it, a job on one node is read from its only line.
    """
    lines = _NODE_LINE.findall(text)
    mine = [gres for nodes, gres in lines if nodes == node_name]
    if not mine and len(lines) == 1:
        mine = [lines[0][1]]
    found: dict[str, list[int]] = {}
    for gres in mine:
        for name, indices in _ENTRY.findall(gres):
            found[name] = sorted({*found.get(name, []), *index_list(indices)})
    return found
