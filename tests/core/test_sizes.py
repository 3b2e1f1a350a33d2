from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelkit.sizes import format_binary_size, format_human_size, parse_binary_size


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("0", 0),
        ("512", 512),
        ("1k", 1024),
        ("512m", 512 * 1024**2),
        ("16G", 16 * 1024**3),
        ("1.5g", 3 * 512 * 1024**2),
        ("2T", 2 * 1024**4),
        ("16GiB", 16 * 1024**3),
        ("16gib", 16 * 1024**3),
        ("1GB", 10**9),
        ("1.5kB", 1500),
        ("2TB", 2 * 10**12),
        ("512B", 512),
        ("512b", 512),
        (" 4M ", 4 * 1024**2),
        (7, 7),
    ],
)
def test_parse(text, size):
    assert parse_binary_size(text) == size


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("-1G", "negative"),
        (-5, "negative"),
        ("12X", "not a size"),
        ("", "not a size"),
        ("G", "not a size"),
        ("1.5", "whole number"),
        ("\uff11\uff16G", "not a size"),  # full-width digits
        ("\u0661G", "not a size"),  # Arabic-Indic digit
        ("1iB", "not a size"),
        ("1GBB", "not a size"),
        (True, "not a size"),
        (1.5, "string like"),
        (None, "string like"),
    ],
)
def test_parse_errors(text, message):
    with pytest.raises(ValueError, match=message):
        parse_binary_size(text)


@given(st.integers(min_value=0, max_value=2**50))
def test_format_then_parse_round_trips(size):
    assert parse_binary_size(format_binary_size(size)) == size


def test_format_picks_largest_exact_suffix():
    assert format_binary_size(16 * 1024**3) == "16G"
    assert format_binary_size(1536 * 1024**2) == "1536M"
    assert format_binary_size(1000) == "1000"
    assert format_binary_size(0) == "0"


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (0, "0"),
        (512, "512B"),
        (1024, "1K"),
        (16 * 1024**3, "16G"),
        (24684084 * 1024, "23.5G"),
        (130560 * 1024**2, "127.5G"),
        (1536 * 1024**2, "1.5G"),
        (1024**4 * 3, "3T"),
    ],
)
def test_human_sizes(size, text):
    assert format_human_size(size) == text


@given(st.integers(min_value=1, max_value=1024**5 - 1))
def test_a_human_size_is_short_and_within_five_percent(size):
    text = format_human_size(size)
    assert len(text) <= 7
    if text.endswith("B"):
        assert int(text[:-1]) == size
    else:
        value = Decimal(text[:-1]) * 1024 ** ("KMGT".index(text[-1]) + 1)
        assert abs(value - size) <= size * Decimal("0.05")
