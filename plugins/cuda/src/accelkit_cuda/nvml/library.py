"""The NVML boundary as a whole: one part per subject, all over one ``pynvml`` module."""

from __future__ import annotations

import attrs

from accelkit_cuda.nvml import NVMLModule
from accelkit_cuda.nvml.health import NVMLHealth
from accelkit_cuda.nvml.inventory import NVMLDevices, NVMLLinks, NVMLMig, NVMLSystem
from accelkit_cuda.nvml.readings import NVMLProcesses, NVMLReadings


@attrs.frozen
class NVMLLibrary:
    """The parts of the NVML boundary; the plugin hands each of its modules the one it needs.

    Every part raises the module's ``NVMLError`` (its ``error_type``) for what it does not
    read as absent.
    """

    system: NVMLSystem
    devices: NVMLDevices
    mig: NVMLMig
    links: NVMLLinks
    readings: NVMLReadings
    processes: NVMLProcesses
    health: NVMLHealth

    @classmethod
    def over(cls, module: NVMLModule) -> NVMLLibrary:
        """Every part over ``module`` (``pynvml`` or a double of it)."""
        return cls(
            system=NVMLSystem(module),
            devices=NVMLDevices(module),
            mig=NVMLMig(module),
            links=NVMLLinks(module),
            readings=NVMLReadings(module),
            processes=NVMLProcesses(module),
            health=NVMLHealth(module),
        )
