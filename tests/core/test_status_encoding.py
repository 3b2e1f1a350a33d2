"""``status --json`` writes its rows and held seconds faster, and exactly as before."""

from __future__ import annotations

import copy
import json
from decimal import Decimal
from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from accelkit.cli.status_cmd import PIECE_ROWS, _add_health, _json_lines, _json_pieces, _json_tails
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


@given(
    st.sampled_from(
        [1, PIECE_ROWS - 1, PIECE_ROWS, PIECE_ROWS + 1, 2 * PIECE_ROWS, 2 * PIECE_ROWS + 3]
    )
)
def test_the_rows_are_written_in_pieces_of_whole_rows_that_make_the_same_text(count):
    found = [{"workload": f"w{i}", "n": i} for i in range(count)]
    tails = [f', "t": {i}}}' for i in range(count)]
    pieces = list(_json_pieces(found, tails))
    expected = (
        "[\n  " + ",\n  ".join(json.dumps({**row, "t": i}) for i, row in enumerate(found)) + "\n]"
    )
    assert "".join(pieces) == expected
    assert len(pieces) == -(-count // PIECE_ROWS) + 1  # the rows' pieces, then the bracket
    assert all(piece.endswith("}") for piece in pieces[:-1])


@given(st.integers(min_value=0, max_value=10**22))
def test_held_seconds_read_as_the_exact_decimal_quotient(ns):
    assert _seconds_text(ns) == format(Decimal(ns) / Decimal(10**9), "f")


names = st.sampled_from(["cpu", "mem", "cuda", "gpu\u00e9", 'q"t'])
device = st.sampled_from(["0", "1", "cuda0", "root", "\u00e9\n"])
ids = st.lists(device, max_size=3, unique=True)
health_of = st.fixed_dictionaries({"state": st.sampled_from(["healthy", "failed"]), "reason": text})
note = st.builds(
    lambda t: SimpleNamespace(to_json=lambda: {"at": "1", "plugin": "cpu", "text": t}), text
)


@st.composite
def snapshots(draw):
    """Rows (as ``status_row`` makes them) with the health, notes and held seconds of a node."""
    rows = []
    for i in range(draw(st.integers(0, 6))):
        devices = draw(st.dictionaries(names, ids, max_size=3))
        rows.append(
            {
                "agent": draw(st.sampled_from(["agent-1", "agent-2"])),
                "workload": f"w{i}",
                "devices": devices,
                "resource_data": draw(st.dictionaries(names, st.dictionaries(text, text))),
            }
        )
    health = draw(st.dictionaries(names, st.dictionaries(device, health_of)))
    keys = [(row["agent"], row["workload"]) for row in rows]
    notes = {key: draw(st.lists(note, max_size=2)) for key in keys if draw(st.booleans())}
    held = {
        key: draw(st.dictionaries(names, st.dictionaries(text, text, max_size=2)))
        for key in keys
        if draw(st.booleans())
    }
    return rows, health, notes, held


@given(snapshots())
def test_the_tails_write_each_row_as_its_health_and_held_seconds_added_would(snapshot):
    rows, health, notes, held = snapshot
    whole = copy.deepcopy(rows)
    shown: dict = {}
    for row in whole:
        key = (row["agent"], row["workload"])
        _add_health(row, health, notes.get(key, []), shown)
        row["held_seconds"] = held.get(key, {})
    assert _json_lines(rows, _json_tails(rows, health, notes, held)) == _json_lines(whole)
