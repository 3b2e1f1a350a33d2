"""Rules for config values that need more than a type: sizes, amounts, choices, names.

Each :class:`~accelkit.config.converter.Rule` annotates a schema field
(``reserved_mem: Annotated[int, BYTE_SIZE]``) and raises ``ValueError`` with the message an
operator reads. Plugins use them for their own sections too.
"""

from __future__ import annotations

import enum
import re
from decimal import Decimal
from typing import Any, TypeVar

from accelkit.config.converter import Rule
from accelkit.sizes import parse_binary_size
from accelkit.types import amount_in_range, parse_choice, range_problem, to_decimal

__all__ = [
    "AGENT_ID",
    "BYTE_SIZE",
    "NAMES",
    "NON_EMPTY_STRING",
    "NON_NEGATIVE_INT",
    "POSITIVE_BYTE_SIZE",
    "RESOURCE_DOMAIN",
    "SECONDS",
    "choice",
    "decimal_between",
    "int_between",
    "positive_decimal",
    "resource_domain",
]

_E = TypeVar("_E", bound=enum.StrEnum)
_AGENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_DNS_LABEL = r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(?:\.{_DNS_LABEL})*")
#: Kubernetes checks ``requests.<domain>/<name>`` too, and its prefix is a DNS subdomain of at
#: most 253 characters
_MAX_DOMAIN = 253 - len("requests.")


def choice(enum_type: type[_E], what: str) -> Rule:
    """One of an enum's values: ``unknown mode 'split' (use 'shared', …)``."""

    def parse(value: Any) -> _E:
        return parse_choice(enum_type, value, what)

    return Rule(parse)


def resource_domain(value: Any) -> str:
    """The domain of Kubernetes extended resources (``<domain>/<slot>``): a DNS subdomain
    outside ``kubernetes.io``, which the kubelet keeps for its own resources."""
    if not isinstance(value, str) or not value:
        msg = f"expected a domain name such as 'example.com', got {value!r}"
        raise ValueError(msg)
    if len(value) > _MAX_DOMAIN or not _DNS_SUBDOMAIN.fullmatch(value):
        msg = (
            f"{value!r} is not a DNS subdomain: lowercase letters, digits, '-' and '.', labels of "
            f"at most 63 and {_MAX_DOMAIN} characters in all (e.g. 'example.com')"
        )
        raise ValueError(msg)
    if value == "kubernetes.io" or value.endswith(".kubernetes.io"):
        msg = f"{value!r} is in kubernetes.io, which Kubernetes keeps for its own resources"
        raise ValueError(msg)
    return value


def _positive_size(value: Any) -> int:
    size = parse_binary_size(value)
    if size == 0:
        msg = "must be greater than zero"
        raise ValueError(msg)
    return size


def _non_negative_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        msg = f"expected a non-negative integer, got {value!r}"
        raise ValueError(msg)
    return value


def _non_empty_string(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():  # blanks name nothing either
        msg = f"expected a non-empty string, got {value!r}"
        raise ValueError(msg)
    return value


def _names(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        msg = f"expected a list of plugin names, got {value!r}"
        raise ValueError(msg)
    if "" in (v.strip() for v in value):  # no plugin is named so: a slip, never a choice
        msg = f"an empty plugin name in {value!r}"
        raise ValueError(msg)
    return tuple(value)


def _agent_id(value: Any) -> str:
    if not isinstance(value, str) or not value:
        msg = "every agent needs a non-empty string id"
        raise ValueError(msg)
    if not _AGENT_ID.fullmatch(value):
        # ids name ledger files, metric labels and CDI kinds: keep them plain
        msg = (
            f"agent id {value!r} must start with a letter or digit and hold only "
            "letters, digits, '.', '_' and '-' (at most 64 characters)"
        )
        raise ValueError(msg)
    return value


def _decimal(value: Any, example: str) -> Decimal:
    # floats are refused as everywhere amounts are read: "1.5" keeps its exact value
    if isinstance(value, float):
        msg = f"must be an integer or a decimal string such as {example!r}, not a float ({value!r})"
        raise ValueError(msg)
    try:
        return to_decimal(value)
    except (TypeError, ValueError):
        msg = f"must be a decimal string such as {example!r}, got {value!r}"
        raise ValueError(msg) from None


def positive_decimal(example: str) -> Rule:
    """A decimal amount greater than zero, from an integer or a string (never a float)."""

    def parse(value: Any) -> Decimal:
        amount = _decimal(value, example)
        if amount <= 0:
            msg = f"must be greater than zero, got {value!r}"
            raise ValueError(msg)
        if not amount_in_range(amount):
            raise ValueError(range_problem(amount))
        return amount

    return Rule(parse)


def decimal_between(low: Decimal, high: Decimal) -> Rule:
    """A decimal amount from ``low`` to ``high``, from an integer or a string."""

    def parse(value: Any) -> Decimal:
        amount = _decimal(value, "1.5")
        if not low <= amount <= high:
            msg = f"must be from {low} to {high}, got {value!r}"
            raise ValueError(msg)
        return amount

    return Rule(parse)


def int_between(low: int, high: int) -> Rule:
    """A whole number from ``low`` to ``high`` (an integer, or a string of digits)."""

    def parse(value: Any) -> int:
        try:
            if isinstance(value, bool) or not isinstance(value, int | str):
                raise ValueError
            number = int(value)
        except ValueError:
            msg = f"must be a whole number from {low} to {high}, got {value!r}"
            raise ValueError(msg) from None
        if not low <= number <= high:
            msg = f"must be from {low} to {high}, got {number}"
            raise ValueError(msg)
        return number

    return Rule(parse)


#: the kernel's largest ``pid_max``: no workload can have more processes
MAX_PIDS = 4194304
#: ``pids``: the most processes (and threads) one workload may have at once
PIDS = int_between(1, MAX_PIDS)


#: a time limit beyond a day is a typo, not a wish
MAX_SECONDS = Decimal(86400)
#: a duration written as a string: ASCII digits with an optional fraction, nothing else
_DECIMAL_TEXT = re.compile(r"[0-9]+(?:\.[0-9]+)?", re.ASCII)


def _seconds(value: Any) -> Decimal:
    """A duration in seconds, one rule for every key that takes one.

    An integer (``30``), a decimal string (``"2.5"``: ASCII digits, an optional fraction, no
    sign, exponent, unit or blank) or a TOML float (``2.5``, read as written, never as a binary
    float); above 0 and at most a day.
    """
    written = isinstance(value, int | float) and not isinstance(value, bool)
    if not written and not (isinstance(value, str) and _DECIMAL_TEXT.fullmatch(value)):
        msg = f"expected a number of seconds (30, 2.5 or '2.5'), got {value!r}"
        raise ValueError(msg)
    seconds = Decimal(repr(value) if isinstance(value, float) else str(value))
    if not seconds.is_finite() or not 0 < seconds <= MAX_SECONDS:
        msg = f"expected seconds above 0 and at most 86400, got {value!r}"
        raise ValueError(msg)
    return seconds


BYTE_SIZE = Rule(parse_binary_size)
POSITIVE_BYTE_SIZE = Rule(_positive_size)
NON_NEGATIVE_INT = Rule(_non_negative_int)
NON_EMPTY_STRING = Rule(_non_empty_string)
RESOURCE_DOMAIN = Rule(resource_domain)
NAMES = Rule(_names)
AGENT_ID = Rule(_agent_id)
SECONDS = Rule(_seconds)
