"""Discrete-event engine: virtual time, emulated workers, links and model loading."""

from hetserve.sim.engine import SimConfig, Simulator
from hetserve.sim.result import SimResult

__all__ = ["SimConfig", "SimResult", "Simulator"]
