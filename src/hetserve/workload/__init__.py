"""Arrival processes, streams and trace readers -> request streams."""

from hetserve.workload.arrivals import (
    MMPP2,
    PROCESSES,
    ArrivalProcess,
    Constant,
    Gamma,
    OnOff,
    Poisson,
    parse_process,
)
from hetserve.workload.trace import Trace, generate

__all__ = [
    "MMPP2",
    "PROCESSES",
    "ArrivalProcess",
    "Constant",
    "Gamma",
    "OnOff",
    "Poisson",
    "Trace",
    "generate",
    "parse_process",
]
