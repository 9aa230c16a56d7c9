"""Planners by name: every planner returns a core ``Plan``, and says which scheduler serves
its plans by default.

``hetserve plan --planner NAME`` and ``serve --planner NAME`` look planners up here. A new
planner is a function ``build(request, options) -> PlanResult`` registered with
:func:`register_planner` in its own module, plus one line in ``BUILTIN`` (the module that
registers each built-in planner; ``core.registry``'s one shape): no command-line branch.
Its options are named in the registration; a command passes only those (giving another
planner's option is an error naming the planner that takes it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from hetserve.core.cluster import Cluster
from hetserve.core.errors import HetserveError
from hetserve.core.latency import LatencyModel
from hetserve.core.models import ZOO, ModelCatalog
from hetserve.core.plan import Plan, SchedulerChoice
from hetserve.core.registry import Registry

# the built-in planners by name -> the module whose import registers them
BUILTIN: dict[str, str] = dict.fromkeys(
    ("ppipe", "np", "dart-r", "herd", "deepplan", "magicbatch", "rampa", "pe", "ncar"),
    "hetserve.planning.planners",
)


@dataclass
class PlanRequest:
    """What a command knows when it asks for a plan: the cluster, the models as given,
    per-model SLOs (ms) and workload weights where given, and the latency source (built on
    first use: a planner that needs none, DeepPlan's, never builds it)."""

    cluster: Cluster
    models: list[str]
    slo_ms: dict[str, float] | None = None
    weights: dict[str, float] | None = None
    latency_source: Callable[[], tuple[LatencyModel, list[str]]] | None = None
    progress: Callable[[], None] | None = None
    model_catalog: ModelCatalog = ZOO  # where the models' graphs and layer tables come from
    _latency: tuple[LatencyModel, list[str]] | None = field(default=None, repr=False)

    def latency(self) -> tuple[LatencyModel, list[str]]:
        """The latency model and the models' canonical names."""
        if self._latency is None:
            if self.latency_source is None:
                raise HetserveError("this planner needs a latency source")
            self._latency = self.latency_source()
        return self._latency


@dataclass
class PlanResult:
    """A plan, and what the planner found on the way that a report may show (every
    DeepPlan kind's predicted cold start, MagicBatch's options, RAMPA's placements)."""

    plan: Plan
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Planner:
    name: str
    build: Callable[[PlanRequest, Mapping[str, Any]], PlanResult]
    scheduler: SchedulerChoice  # serves its plans unless a command names another
    options: tuple[str, ...]  # the options it takes (command-line names, underscored)
    summary: str


#: planners by name (``core.registry``: the one registry shape)
PLANNERS: Registry[Planner] = Registry("planner", BUILTIN)


def register_planner(
    name: str,
    scheduler: str,
    *,
    options: Sequence[str] = (),
    params: Mapping[str, Any] | None = None,
    summary: str = "",
) -> Callable[[Callable[..., PlanResult]], Callable[..., PlanResult]]:
    def deco(fn: Callable[..., PlanResult]) -> Callable[..., PlanResult]:
        choice = SchedulerChoice(scheduler, dict(params or {}))
        PLANNERS.register(name, Planner(name, fn, choice, tuple(options), summary))
        return fn

    return deco


def planners() -> dict[str, Planner]:
    """Every registered planner by name (the built-ins loaded)."""
    return PLANNERS.all()


def get_planner(name: str) -> Planner:
    return PLANNERS.get(name)


def option_owners() -> dict[str, list[str]]:
    """Per planner-specific option, the planners that take it."""
    out: dict[str, list[str]] = {}
    for p in planners().values():
        for o in p.options:
            out.setdefault(o, []).append(p.name)
    return out


def make_plan(name: str, request: PlanRequest, options: Mapping[str, Any]) -> PlanResult:
    """Plan with planner ``name``; ``options`` holds only options it takes. The plan names
    the planner and, unless it chose one itself, the planner's default scheduler."""
    spec = get_planner(name)
    extra = sorted(set(options) - set(spec.options))
    if extra:
        raise HetserveError(f"planner {name}: unknown options {', '.join(extra)}")
    res = spec.build(request, options)
    plan = res.plan
    meta = {**plan.meta, "planner": plan.meta.get("planner", name)}
    res.plan = replace(plan, meta=meta, scheduler=plan.scheduler or spec.scheduler)
    return res


def model_graph(plan: Plan, model: str, model_catalog: ModelCatalog = ZOO) -> Any:
    """The graph of a plan's model, as the server advertises its tensors: a RAMPA plan's
    models are Table V services (``planning.rampa.serving.service_graph``), every other
    plan's are ``model_catalog``'s or their instances (``bert-base@3``)."""
    if plan.meta.get("latency_source") == "rampa":
        from hetserve.planning.rampa.serving import service_graph

        return service_graph(plan, model)
    from hetserve.core.layerlatency import base_model

    return model_catalog.graph(base_model(model))
