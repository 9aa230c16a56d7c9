"""Data plane: one Scheduler protocol, one module per policy (registered by name)."""

from hetserve.scheduling.protocol import (
    SCHEDULERS,
    Action,
    BaseScheduler,
    ClusterView,
    Dispatch,
    Drop,
    Evict,
    Load,
    Preempt,
    RouteStep,
    Scheduler,
    SetTimer,
    StageReport,
    WorkerInfo,
    make_scheduler,
    register,
)

__all__ = [
    "SCHEDULERS",
    "Action",
    "BaseScheduler",
    "ClusterView",
    "Dispatch",
    "Drop",
    "Evict",
    "Load",
    "Preempt",
    "RouteStep",
    "Scheduler",
    "SetTimer",
    "StageReport",
    "WorkerInfo",
    "make_scheduler",
    "register",
]
