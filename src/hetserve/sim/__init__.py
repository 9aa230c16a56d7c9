"""Discrete-event engine: virtual time, emulated workers, links and model loading."""

from hetserve.sim.engine import SimConfig, SimulationError, Simulator
from hetserve.sim.result import SimResult

__all__ = ["SimConfig", "SimResult", "SimulationError", "Simulator"]
