"""The Slurm prolog answered by ``accelkit serve``: no Python start before a job.

With ``[bridge.slurm] serve-prologs = true``, ``accelkit serve`` listens on the unix socket
``<state-dir>/slurm/prolog.sock`` (root only). The prolog script of ``accelkit slurm
prolog-script`` posts the job's environment there with ``curl`` (``env -0``, NUL-separated) and
``serve`` runs :func:`~accelkit.bridge.slurm.job_hooks.prolog` on the node it has open: the
answer is ``ok`` or the ``error: ...`` line the prolog would print. Where no ``serve`` answers
(it is not running, ``curl`` is missing), the script runs ``accelkit slurm prolog`` instead.
Requests are taken one at a time, and never during one of ``serve``'s rounds (``lock``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from aiohttp import web

from accelkit.bridge.slurm.job_hooks import prolog
from accelkit.config.model import SlurmBridgeConfig
from accelkit.errors import AccelkitError, InvalidResourceArgument, UnknownAgent
from accelkit.node import Node
from accelkit.types import AgentId

__all__ = ["PrologServer", "client_script", "parse_env", "socket_path"]

log = logging.getLogger(__name__)

#: the most a prolog's environment may weigh
MAX_BODY = 1 << 20


def socket_path(state_dir: Path | str) -> Path:
    """Where ``serve`` answers prologs."""
    return Path(state_dir) / "slurm" / "prolog.sock"


def parse_env(body: bytes) -> dict[str, str]:
    """``env -0`` output as a mapping (entries without ``=`` are left out)."""
    env: dict[str, str] = {}
    for entry in body.split(b"\0"):
        key, sep, value = entry.decode(errors="replace").partition("=")
        if sep and key:
            env[key] = value
    return env


class PrologServer:
    """Answers ``POST /prolog?agent=ID`` on the socket while the ``async with`` block runs."""

    def __init__(
        self,
        node: Node,
        settings: SlurmBridgeConfig,
        lock: asyncio.Lock,
        say: Callable[[str], None],
    ) -> None:
        self.node = node
        self.settings = settings
        self.lock = lock
        self.say = say
        self.path = socket_path(node.config.resource.state_dir)
        self._runner: web.AppRunner | None = None

    def _agent(self, asked: str | None) -> AgentId:
        known = sorted(self.node.agents)
        if asked is not None:
            if asked not in known:
                raise UnknownAgent(asked, known)
            return AgentId(asked)
        if len(known) != 1:
            msg = f"the node has several agents ({', '.join(known)}); pick one with --agent"
            raise InvalidResourceArgument(msg)
        return AgentId(known[0])

    async def _prolog(self, request: web.Request) -> web.Response:
        env = parse_env(await request.read())
        try:
            async with self.lock:
                agent = self._agent(request.query.get("agent"))
                await prolog(self.node, agent, self.settings, env)
        except AccelkitError as exc:
            return web.Response(status=409, text=f"error: {exc}\n")
        except Exception as exc:
            log.exception("the Slurm prolog of job %s failed", env.get("SLURM_JOB_ID"))
            return web.Response(status=500, text=f"error: internal error: {exc!r}\n")
        return web.Response(text="ok\n")

    async def __aenter__(self) -> PrologServer:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post("/prolog", self._prolog)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        old = os.umask(0o177)  # the socket is root's from the start
        try:
            await web.UnixSite(self._runner, str(self.path)).start()
        finally:
            os.umask(old)
        self.say(f"answering Slurm prologs on {self.path}")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def client_script(state_dir: str, accelkit: str, config: str, agent: str | None) -> str:
    """The ``Prolog=`` script: ask ``serve`` over the socket, else run ``accelkit slurm prolog``."""
    query = f"?agent={agent}" if agent else ""
    fallback = [
        accelkit,
        "slurm",
        "prolog",
        "--config",
        config,
        *(["--agent", agent] if agent else []),
    ]
    return PROLOG_SCRIPT.format(
        sock=shlex.quote(str(socket_path(state_dir))),
        url=shlex.quote(f"http://accelkit/prolog{query}"),
        fallback=" ".join(shlex.quote(w) for w in fallback),
    )


PROLOG_SCRIPT = """#!/bin/sh
# Slurm Prolog of accelkit (from 'accelkit slurm prolog-script'): 'accelkit serve' books the
# job when it answers on its socket, else 'accelkit slurm prolog' does.
sock={sock}
if [ -S "$sock" ] && command -v curl >/dev/null 2>&1; then
    out=$(env -0 | curl -sS --fail-with-body --max-time 120 --unix-socket "$sock" \\
        --data-binary @- {url} 2>&1)
    case $? in
        0) exit 0;;
        7) ;;  # no serve behind the socket: book here
        *) printf '%s\\n' "$out" | grep -v '^curl: (22)' >&2; exit 2;;
    esac
fi
exec {fallback}
"""
