from __future__ import annotations

from decimal import Decimal, localcontext
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelkit.metrics import Measurement, MetricContext, MetricType, NodeMetric
from accelkit.types import (
    MESSAGE_DIGITS,
    ComputeDevice,
    DeviceSlotInfo,
    Mount,
    MountType,
    SlotSpec,
    SlotType,
    Workload,
    WorkloadConfig,
    WorkloadType,
    amount_in_range,
    describe_amount,
    format_amount,
    is_digits,
    is_multiple,
    to_decimal,
)


def test_to_decimal_refuses_floats_and_bools():
    with pytest.raises(TypeError, match="float"):
        to_decimal(0.5)
    with pytest.raises(TypeError, match="bool"):
        to_decimal(True)


def test_to_decimal_refuses_non_finite_and_garbage():
    with pytest.raises(ValueError, match="finite"):
        to_decimal("NaN")
    with pytest.raises(ValueError, match="not a decimal"):
        to_decimal("1.2.3")
    with pytest.raises(TypeError):
        to_decimal([1])


def test_to_decimal_accepts_int_str_decimal():
    assert to_decimal(3) == Decimal(3)
    assert to_decimal("0.25") == Decimal("0.25")
    assert to_decimal(Decimal("1.5")) == Decimal("1.5")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (Decimal("5368709120"), "5368709120"),
        (Decimal("5.36870912E+9"), "5368709120"),
        (Decimal("0.40"), "0.4"),
        (Decimal("1.000"), "1"),
        (Decimal("0"), "0"),
        (Decimal("0.01"), "0.01"),
    ],
)
def test_format_amount_is_plain(value, text):
    assert format_amount(value) == text


@given(st.decimals(allow_nan=False, allow_infinity=False, places=4, min_value=0, max_value=10**12))
def test_format_amount_round_trips(value):
    text = format_amount(value)
    assert "E" not in text
    assert "e" not in text
    assert Decimal(text) == value


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (Decimal("5.36870912E+9"), "5368709120"),  # plain, as format_amount, while short
        (Decimal("0.40"), "0.4"),
        (Decimal("1" + "0" * 40), "1" + "0" * 40),
        (Decimal("1E+41"), "1E+41"),  # past MESSAGE_DIGITS: scientific, not 42 digits
        (Decimal("1E+999999"), "1E+999999"),  # not a million digits
        (Decimal("-1E+999999"), "-1E+999999"),
        (Decimal("1E-999999"), "1E-999999"),
        (Decimal("NaN"), "NaN"),
    ],
)
def test_describe_amount_keeps_absurd_amounts_short(value, text):
    assert describe_amount(value) == text


@given(st.decimals(allow_nan=False, allow_infinity=False).filter(lambda d: d.adjusted() < 10**6))
def test_describe_amount_is_exact_and_short(value):
    text = describe_amount(value)
    assert Decimal(text) == value
    # bounded by its digits and MESSAGE_DIGITS, however large or small its exponent
    digits = len(value.as_tuple().digits)
    assert len(text) <= digits + 2 * MESSAGE_DIGITS + 10


@pytest.mark.parametrize("amount", ["1E+25", "1E+999999", "0.0000000000000000000000001"])
def test_slot_info_refuses_a_capacity_out_of_range(amount):
    with pytest.raises(ValueError, match=r"slot 'x': capacity .* is out of range \(at most 25"):
        DeviceSlotInfo(SlotType.COUNT, "x", amount)


@pytest.mark.parametrize(
    ("amount", "within"),
    [
        ("9" * 25, True),
        ("1" + "0" * 25, False),
        ("0." + "0" * 23 + "1", True),  # 24 places
        ("0." + "0" * 24 + "1", False),
        ("1." + "0" * 40, True),  # trailing zeros are no places
        ("0", True),
        ("-0", True),
    ],
)
def test_amount_in_range_counts_digits_before_and_places_after(amount, within):
    assert amount_in_range(Decimal(amount)) is within


_AMOUNTS = st.decimals(allow_nan=False, allow_infinity=False, min_value=0, max_value=10**25)


@given(_AMOUNTS, _AMOUNTS.filter(lambda q: q > 0))
def test_is_multiple_is_exact_for_any_quotient(amount, quantum):
    assert is_multiple(amount, quantum) == ((Fraction(amount) / Fraction(quantum)).denominator == 1)
    with localcontext() as exact:
        exact.prec = 200  # seven times the quantum, without rounding
        seven = quantum * 7
    assert is_multiple(seven, quantum)


def test_slot_info_validates_amount_and_converts():
    info = DeviceSlotInfo("count", "cpu", "2")
    assert info.slot_type is SlotType.COUNT
    assert info.amount == Decimal(2)
    with pytest.raises(ValueError, match="negative"):
        DeviceSlotInfo(SlotType.COUNT, "cpu", -1)
    with pytest.raises(ValueError, match=r"unknown-type|not a valid"):
        DeviceSlotInfo("unknown-type", "cpu", 1)


def test_slot_spec_needs_a_name():
    with pytest.raises(ValueError, match="name"):
        SlotSpec("", SlotType.COUNT)


def test_compute_device_rejects_negative_sizes():
    with pytest.raises(ValueError, match="memory_size"):
        ComputeDevice("cuda", "cuda0", "pci", 0, -1, 1)
    with pytest.raises(ValueError, match="device_id"):
        ComputeDevice("cuda", "", "pci", 0, 0, 1)


def test_workload_named_constructors():
    assert Workload.container("w").type is WorkloadType.CONTAINER
    assert Workload.process_tree("w").type is WorkloadType.PROCESS_TREE
    with pytest.raises(ValueError, match="id"):
        Workload("")


@pytest.mark.parametrize("given", ["container", WorkloadType.CONTAINER])
def test_a_workload_type_is_read_from_its_text_or_itself(given):
    assert Workload("w", given).type is WorkloadType.CONTAINER
    assert Workload("w", given) == Workload.container("w")


@pytest.mark.parametrize("given", ["Container", "", None, 3, ["container"]])
def test_anything_else_is_refused_as_the_enum_refuses_it(given):
    with pytest.raises(ValueError, match="is not a valid WorkloadType"):
        Workload("w", given)


def test_workload_config_defaults_and_conversion():
    config = WorkloadConfig(
        mounts=[Mount.device("/dev/nvidia0")], cpuset_cpus=[0, 1], cdi_devices=["a=b"]
    )
    assert config.mounts[0].type is MountType.DEVICE
    assert config.mounts[0].target == "/dev/nvidia0"
    assert config.cpuset_cpus == (0, 1)
    assert config.cdi_devices == ("a=b",)
    assert WorkloadConfig().memory_limit is None
    assert WorkloadConfig() == WorkloadConfig()


def test_metric_keys_have_no_dots():
    with pytest.raises(ValueError, match="no dots"):
        NodeMetric("gpu.util", MetricType.GAUGE, "%", Measurement(1))
    metric = NodeMetric("gpu_util", "gauge", "%", Measurement(1, 100), {"cuda0": Measurement(1)})
    assert metric.type is MetricType.GAUGE
    assert metric.node.capacity == Decimal(100)


def test_metric_context_rate_needs_two_readings():
    ctx = MetricContext(timestamp=10.0)
    assert ctx.rate("x", Decimal(5)) is None
    later = MetricContext(timestamp=12.0, previous=ctx.previous)
    assert later.rate("x", Decimal(9)) == Decimal(2)
    assert later.advance().previous is later.previous


@pytest.mark.parametrize(
    ("text", "digits"),
    [("0", True), ("4711", True), ("", False), ("-1", False), ("1.5", False), ("²", False),
     ("٣", False), ("1 ", False)],
)  # fmt: skip
def test_is_digits_is_what_int_reads_as_a_plain_number(text: str, digits: bool) -> None:
    assert is_digits(text) is digits
    if digits:
        assert int(text) >= 0  # int() reads it
