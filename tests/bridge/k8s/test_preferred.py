"""GetPreferredAllocation's choice among the kubelet's available devices."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from accelkit.bridge.k8s.preferred import preferred_devices

NUMA = {"a0": 0, "a1": 0, "b0": 1, "b1": 1, "b2": 1, "c0": 2, "x": None}


def test_a_request_that_fits_on_one_node_stays_there_on_the_smallest_such_node() -> None:
    assert preferred_devices(list(NUMA), [], 2, NUMA) == ["a0", "a1"]
    assert preferred_devices(list(NUMA), [], 3, NUMA) == ["b0", "b1", "b2"]
    assert preferred_devices(list(NUMA), [], 1, NUMA) == ["c0"]


def test_must_include_comes_first_and_its_node_is_filled_next() -> None:
    assert preferred_devices(list(NUMA), ["b2"], 2, NUMA) == ["b2", "b0"]
    assert preferred_devices(list(NUMA), ["a1", "c0"], 3, NUMA) == ["a1", "c0", "a0"]


def test_a_request_larger_than_any_node_spills_from_the_largest() -> None:
    assert preferred_devices(list(NUMA), [], 5, NUMA) == ["b0", "b1", "b2", "a0", "a1"]


@given(
    available=st.lists(st.sampled_from(sorted(NUMA)), unique=True),
    data=st.data(),
)
def test_the_choice_is_the_size_asked_from_the_available_with_must_include(
    available: list[str], data: st.DataObject
) -> None:
    must = data.draw(
        st.lists(st.sampled_from(available), unique=True) if available else st.just([])
    )
    size = data.draw(st.integers(min_value=len(must), max_value=len(available)))
    chosen = preferred_devices(available, must, size, NUMA)
    assert len(chosen) == size
    assert len(set(chosen)) == size
    assert set(chosen) <= set(available)
    assert chosen[: len(must)] == must
