"""The accelkit conformance kit: a pytest plugin with a reusable suite for compute plugins.

A vendor subclasses :class:`PluginConformance` in its tests and provides a ``plugin`` fixture
that returns a fresh, not yet initialised instance of its plugin::

    from accelkit.testing import PluginConformance

    class TestMyPlugin(PluginConformance):
        @pytest.fixture
        def plugin(self):
            return MyPlugin({})

Installing accelkit registers this module with pytest (entry point ``pytest11``).
"""

from __future__ import annotations

from accelkit.testing.suite import PluginConformance

__all__ = ["PluginConformance"]
