"""Bad arguments to the Node's Python API are refused before anything is booked."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from decimal import Decimal
from typing import Any

import pytest

from accelkit.config import load_host_config
from accelkit.errors import InvalidResourceArgument
from accelkit.node import Node
from accelkit.types import AgentId, SlotName, Workload
from accelkit.workload import Ledger

AGENT = AgentId("agent-1")
CPU = {SlotName("cpu"): Decimal(1)}

CASES: dict[str, tuple[Callable[[Node], Coroutine[Any, Any, Any]], str]] = {
    "book: slots not a mapping": (
        lambda n: n.book(AGENT, Workload.process_tree("w"), None),  # type: ignore[arg-type]
        "expected a mapping of slot names to amounts, not NoneType",
    ),
    "book: unknown affinity policy": (
        lambda n: n.book(AGENT, Workload.process_tree("w"), CPU, affinity_policy="nearest"),
        "unknown affinity policy 'nearest' (use 'prefer-single-node', 'interleaved')",
    ),
    "run: empty argv": (lambda n: n.run(AGENT, CPU, []), "argv must be a non-empty sequence"),
    "run: argv a string": (  # would run its letters: 't' 'r' 'u' 'e'
        lambda n: n.run(AGENT, CPU, "true"),
        "argv must be a non-empty sequence of strings (the program and its arguments), not 'true'",
    ),
    "run: argv not strings": (
        lambda n: n.run(AGENT, CPU, ["echo", 5]),  # type: ignore[list-item]
        "argv must hold strings only",
    ),
    "run: negative grace": (
        lambda n: n.run(AGENT, CPU, ["true"], grace=-1),
        "grace must be a finite number of seconds, 0 or more, not -1",
    ),
    "run: grace not a number": (
        lambda n: n.run(AGENT, CPU, ["true"], grace=float("nan")),
        "not nan",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_argument_is_refused_and_books_nothing(mock_node, case: str) -> None:
    config = load_host_config(mock_node(cpus=1, mem="1G"))
    call, words = CASES[case]

    async def main() -> None:
        async with Node.open(config) as node:
            with pytest.raises(InvalidResourceArgument) as caught:
                await call(node)
            assert words in str(caught.value)
            assert await node.status() == []

    asyncio.run(main())
    assert Ledger(config.resource.state_dir).read_all() == {}
