"""NUMA affinity: which NUMA nodes a request should prefer."""

from __future__ import annotations

import enum
from collections.abc import Iterable

import attrs

from accelkit.reprs import attrs_eq, attrs_hash, attrs_repr


class AffinityPolicy(enum.StrEnum):
    """How a request is laid out over NUMA nodes when the hint names none."""

    PREFER_SINGLE_NODE = "prefer-single-node"
    INTERLEAVED = "interleaved"


def _node_set(value: Iterable[int]) -> frozenset[int]:
    return frozenset(value)


@attrs.frozen(repr=False)
class AffinityHint:
    """A caller's NUMA preference for one ``allocate`` call.

    With ``numa_nodes`` set, devices on those nodes are used first and only the rest of the
    request spills over to other nodes. Otherwise ``policy`` decides: ``PREFER_SINGLE_NODE``
    keeps the request on one node when one node can hold it (the one with the least room that
    does, keeping roomier nodes for larger requests; else the fewest nodes, most free first),
    ``INTERLEAVED`` spreads it over the nodes as evenly as their free amounts allow. The policy
    also applies among the hinted nodes when ``numa_nodes`` names several. Within the chosen
    nodes the map's :class:`~accelkit.allocmap.AllocationStrategy` picks the devices. On
    fraction maps a request that fits on one device stays on one device whatever the hint (a
    device on the hinted nodes when one can hold it); the hint shapes only requests that must
    be split.
    """

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    policy: AffinityPolicy = attrs.field(converter=AffinityPolicy)
    numa_nodes: frozenset[int] = attrs.field(default=frozenset(), converter=_node_set)
