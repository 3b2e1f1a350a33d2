"""The host configuration (DESIGN §7): value objects, the declarative schema and the loader.

Every TOML table accelkit reads (the host config, each plugin's ``[plugins.config.NAME]``
section, the mock device file) is a frozen attrs class structured by one cattrs converter
(:mod:`accelkit.config.converter`). A plugin declares its section's schema with the names
exported here (provisional, see the stability policy): :func:`read_section`, :class:`Rule` and
the rules such as :func:`int_between`, and :class:`Renamed` for a key whose name changed. A
plugin that reads a file of its own with the same rules and messages (the mock plugin's device
file) uses :func:`read_toml`, :func:`with_lines`, :func:`structure`, :data:`MISSING`,
:data:`KeyPath`, :func:`format_key` and :func:`raise_all`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accelkit.config.converter import (
    MISSING,
    KeyPath,
    Renamed,
    Rule,
    format_key,
    structure,
)
from accelkit.config.load import (
    HostConfigDraft,
    load_host_config,
    parse_host_config,
    read_host_config,
)
from accelkit.config.model import (
    DEFAULT_AGENT,
    STATE_DIR_KEY,
    AffinityPolicyName,
    AgentConfig,
    AgentResources,
    AllocationMode,
    BridgeConfig,
    HealthConfig,
    HostConfig,
    K8sBridgeConfig,
    ResourceConfig,
    SlurmBridgeConfig,
    default_state_dir,
)
from accelkit.config.plugin_sections import raise_all, read_section
from accelkit.config.reading import read_toml
from accelkit.config.rules import (
    BYTE_SIZE,
    NON_EMPTY_STRING,
    NON_NEGATIVE_INT,
    POSITIVE_BYTE_SIZE,
    RESOURCE_DOMAIN,
    SECONDS,
    choice,
    decimal_between,
    int_between,
    positive_decimal,
    resource_domain,
)
from accelkit.lazy import lazy_names
from accelkit.reprs import attrs_eq, attrs_hash, attrs_repr

if TYPE_CHECKING:  # imported when first used: where a file has errors to place
    from accelkit.config.lines import with_lines

__all__ = [
    "BYTE_SIZE",
    "DEFAULT_AGENT",
    "MISSING",
    "NON_EMPTY_STRING",
    "NON_NEGATIVE_INT",
    "POSITIVE_BYTE_SIZE",
    "RESOURCE_DOMAIN",
    "SECONDS",
    "STATE_DIR_KEY",
    "AffinityPolicyName",
    "AgentConfig",
    "AgentResources",
    "AllocationMode",
    "BridgeConfig",
    "HealthConfig",
    "HostConfig",
    "HostConfigDraft",
    "K8sBridgeConfig",
    "KeyPath",
    "Renamed",
    "ResourceConfig",
    "Rule",
    "SlurmBridgeConfig",
    "attrs_eq",
    "attrs_hash",
    "attrs_repr",
    "choice",
    "decimal_between",
    "default_state_dir",
    "format_key",
    "int_between",
    "load_host_config",
    "parse_host_config",
    "positive_decimal",
    "raise_all",
    "read_host_config",
    "read_section",
    "read_toml",
    "resource_domain",
    "structure",
    "with_lines",
]

__getattr__ = lazy_names(__name__, {"with_lines": ".lines"})
