"""``status --json`` writes its rows and held seconds faster, and exactly as before."""

from __future__ import annotations

import json
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from accelkit.cli.status_cmd import _json_lines
from accelkit.workload.occupancy import _seconds_text

text = st.text(max_size=12)  # any code point: non-ASCII and control characters escaped
values = st.recursive(
    st.none() | st.booleans() | st.integers() | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=12,
)
rows = st.lists(st.dictionaries(text, values, max_size=5), max_size=5)


@given(rows)
def test_the_rows_read_as_json_dumps_writes_each_one_per_line(found):
    expected = "[\n  " + ",\n  ".join(json.dumps(row) for row in found) + "\n]"
    assert _json_lines(found) == (expected if found else "[]")
    assert json.loads(_json_lines(found)) == found


@given(st.integers(min_value=0, max_value=10**22))
def test_held_seconds_read_as_the_exact_decimal_quotient(ns):
    assert _seconds_text(ns) == format(Decimal(ns) / Decimal(10**9), "f")
