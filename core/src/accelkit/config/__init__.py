"""The host configuration (DESIGN §7): value objects and the TOML loader."""

from __future__ import annotations

from accelkit.config.load import load_host_config, parse_host_config
from accelkit.config.model import (
    DEFAULT_AGENT,
    AffinityPolicyName,
    AgentConfig,
    AgentResources,
    AllocationMode,
    HostConfig,
    ResourceConfig,
    default_state_dir,
)

__all__ = [
    "DEFAULT_AGENT",
    "AffinityPolicyName",
    "AgentConfig",
    "AgentResources",
    "AllocationMode",
    "HostConfig",
    "ResourceConfig",
    "default_state_dir",
    "load_host_config",
    "parse_host_config",
]
