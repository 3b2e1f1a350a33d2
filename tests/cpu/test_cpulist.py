"""The kernel CPU list format."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelkit_cpu.cpulist import format_cpu_list, parse_cpu_list


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("0-3,8,10-11", (0, 1, 2, 3, 8, 10, 11)),
        ("0", (0,)),
        ("0-1\n", (0, 1)),
        (" 5 , 3 ", (3, 5)),
        ("2,2,1-2", (1, 2)),
        ("", ()),
        ("\n", ()),
    ],
)
def test_parse(text: str, cpus: tuple[int, ...]) -> None:
    assert parse_cpu_list(text) == cpus


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("0-", "is not 'N' or 'N-M'"),
        ("-1", "is not 'N' or 'N-M'"),
        ("a", "is not 'N' or 'N-M'"),
        ("1,,2", "is not 'N' or 'N-M'"),
        ("0-3,", "is not 'N' or 'N-M'"),
        ("1-2-3", "is not 'N' or 'N-M'"),
        ("0x3", "is not 'N' or 'N-M'"),
        ("3-1", "range '3-1' runs backwards"),
    ],
)
def test_malformed_lists_are_refused_clearly(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=f"malformed CPU list {text!r}: .*{why}"):
        parse_cpu_list(text)


def test_format() -> None:
    assert format_cpu_list([8, 0, 1, 2, 3, 10, 11]) == "0-3,8,10-11"
    assert format_cpu_list([]) == ""
    assert format_cpu_list([4]) == "4"


@given(st.sets(st.integers(min_value=0, max_value=4096)))
def test_format_and_parse_round_trip(cpus: set[int]) -> None:
    assert parse_cpu_list(format_cpu_list(cpus)) == tuple(sorted(cpus))
