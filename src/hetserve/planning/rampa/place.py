"""Placing a sequence of deployment requests until the first that cannot be placed (RAMPA's
metric, section V): the services of Table V, seeded request sequences with Table IV's
category mix, and the JSON of the placements."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from hetserve.core.errors import HetserveError
from hetserve.core.rampa_data import rampa_category_mix, rampa_graph, rampa_services
from hetserve.planning.rampa.aco import AcoParams, ncar, pipeedge, rampa
from hetserve.planning.rampa.perf import ops_of
from hetserve.planning.rampa.state import ClusterState, Placement, Service

METHODS = ("rampa", "pe", "ncar")
# RAMPA Table IX: the stage counts the baselines are run with, per service
TABLE_IX = {
    "service1": (2, 3), "service2": (2, 3, 4), "service3": (1, 2),
    "service4": (2, 3, 4), "service5": (6, 7, 8, 9), "service6": (4, 5),
}  # fmt: skip
CASES = {1: "same-demand", 2: "high-throughput", 3: "low-delay", 4: "huge-model"}


def table_v_services() -> dict[str, Service]:
    """RAMPA's six services (Table V) by name (``service1`` ... ``service6``)."""
    return {
        f"service{s.id}": Service(f"service{s.id}", s.model, tuple(ops_of(rampa_graph(s.model))),
                                  s.throughput_tps, s.latency_s)
        for s in rampa_services()
    }  # fmt: skip


def read_requests(path: str, known: Sequence[str]) -> list[str]:
    """A requests file: a CSV with a ``service`` column, one deployment request a row."""
    from hetserve.core.errors import ConfigError
    from hetserve.core.files import csv_rows

    out = []
    for line, row in csv_rows(path, ("service",)):
        name = row["service"].strip()
        if name not in known:
            raise ConfigError(
                f"{path}:{line}: field 'service': expected one of {', '.join(known)}, got {name!r}"
            )
        out.append(name)
    if not out:
        raise ConfigError(f"{path}: no requests (one row per request after the header)")
    return out


def stage_combinations() -> list[dict[str, int]]:
    """Every combination of Table IX's stage counts (288), services 1-6 in order."""
    names = list(TABLE_IX)
    return [dict(zip(names, c, strict=True)) for c in itertools.product(*TABLE_IX.values())]


def request_sequence(case: int, n: int, seed: int) -> list[str]:
    """``n`` seeded requests: a category by Table IV's probabilities for the case, then a
    service of that category uniformly."""
    if case not in CASES:
        raise HetserveError(f"--case: expected 1..4 ({', '.join(CASES.values())}), got {case}")
    mix = rampa_category_mix()[CASES[case]]
    by_cat: dict[str, list[str]] = {}
    for s in rampa_services():
        by_cat.setdefault(s.category, []).append(f"service{s.id}")
    cats = sorted(mix)
    p = np.array([mix[c] for c in cats])
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        c = cats[int(rng.choice(len(cats), p=p / p.sum()))]
        out.append(by_cat[c][int(rng.integers(len(by_cat[c])))])
    return out


def place_sequence(
    state: ClusterState,
    requests: Sequence[str],
    method: str,
    stages: Mapping[str, int] | None = None,
    params: AcoParams | None = None,
    on_placed: Callable[[int, Placement | None], None] | None = None,
) -> tuple[list[Placement], str | None]:
    """Place requests in order until one cannot be placed; (placements, the request that
    failed or None)."""
    if method not in METHODS:
        raise HetserveError(f"--method: expected one of {', '.join(METHODS)}, got {method!r}")
    if method in ("pe", "ncar") and not stages:
        raise HetserveError(f"--method {method} needs --stages (one count per service)")
    params = params or AcoParams()
    services = table_v_services()
    placed: list[Placement] = []
    for i, name in enumerate(requests):
        svc = services[name]
        if method == "rampa":
            p = rampa(state, svc, AcoParams(**{**params.__dict__, "seed": params.seed + i}))
        elif method == "pe":
            assert stages is not None
            p = pipeedge(state, svc, stages[name])
        else:
            assert stages is not None
            p = ncar(state, svc, stages[name],
                     AcoParams(**{**params.__dict__, "seed": params.seed + i}))  # fmt: skip
        if on_placed is not None:
            on_placed(i, p)
        if p is None:
            return placed, name
        p = Placement(p.service, p.bounds, p.gpus, p.paths, p.est, p.cost, method)
        state.take(p)
        placed.append(p)
    return placed, None
