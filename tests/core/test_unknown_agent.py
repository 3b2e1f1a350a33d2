"""One lookup and one message for an agent the node does not have, wherever it is asked for."""

from __future__ import annotations

import pytest

from accelkit.errors import InvalidResourceArgument, UnknownAgent


def test_look_up_gives_the_agents_view():
    assert UnknownAgent.look_up({"a": 1, "b": 2}, "b") == 2


@pytest.mark.parametrize(
    ("agents", "message"),
    [
        ({"b": 1, "a": 2}, "unknown agent 'x' (agents: a, b)"),
        ({}, "unknown agent 'x' (agents: none)"),
    ],
)
def test_an_unknown_agent_is_refused_naming_the_agents_there_are(agents, message):
    with pytest.raises(UnknownAgent) as caught:
        UnknownAgent.look_up(agents, "x")
    assert str(caught.value) == message
    assert caught.value.agent == "x"
    assert caught.value.known == tuple(sorted(agents))
    assert isinstance(caught.value, InvalidResourceArgument)  # callers that caught it still do
