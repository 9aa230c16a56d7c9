"""Placing a sequence of deployment requests until the first that cannot be placed (RAMPA's
metric, section V): the services of Table V, seeded request sequences with Table IV's
category mix, and the JSON of the placements."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

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


def write_placements(
    path: str | Path, cluster: str, placed: Sequence[Placement], failed: str | None,
    meta: Mapping[str, Any], served: Sequence[Mapping[str, Any]] | None = None,
) -> None:  # fmt: skip
    """The placements file (docs/formats.md#rampa-placements); ``served``: per placement,
    what serving it in the simulator measured."""
    services = [p.to_json() for p in placed]
    for s, r in zip(services, served or [], strict=False):
        s["served"] = {k: r[k] for k in ("requests", "met", "measured_tps",
                                         "measured_latency_ms", "measured_p99_ms")}  # fmt: skip
    data = {
        "cluster": cluster,
        "meta": dict(meta),
        "placed": len(placed),
        "first_failure": failed,
        "services": services,
    }
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data, indent=1))


def read_placements(path: str | Path, state: ClusterState) -> list[Placement]:
    """The placements of a file ``write_placements`` wrote, checked against the cluster
    (``state``'s, which takes them: a GPU serves one service, links carry their traffic);
    one-line errors naming the file and the entry."""
    from hetserve.core.errors import ConfigError
    from hetserve.core.files import read_json
    from hetserve.planning.rampa.perf import estimate

    data = read_json(path, "placements file")
    net = state.net
    if not isinstance(data, dict) or not isinstance(data.get("services"), list):
        raise ConfigError(f"{path}: expected a placements file (an object with 'services')")
    if data.get("cluster") != net.cluster.name:
        raise ConfigError(f"{path}: field 'cluster': the placements are for "
                          f"{data.get('cluster')!r}, not {net.cluster.name!r}")  # fmt: skip
    services = table_v_services()
    out = []
    for i, s in enumerate(data["services"]):
        where = f"{path}: services[{i}]"
        if not isinstance(s, dict) or s.get("service") not in services:
            raise ConfigError(f"{where}: field 'service': expected one of "
                              f"{', '.join(services)}")  # fmt: skip
        svc = services[s["service"]]
        st = s.get("stages")
        try:
            bounds = [int(x["ops"][0]) for x in st] + [int(st[-1]["ops"][1])]
            gpus = tuple(str(x["gpu"]) for x in st)
            paths = tuple(tuple(str(v) for v in x["path"]) for x in st[:-1])
            ends = [int(x["ops"][1]) for x in st]
        except (TypeError, KeyError, IndexError, ValueError):
            raise ConfigError(f"{where}: field 'stages': expected a list of "
                              "{ops: [from, to], gpu, path}") from None  # fmt: skip
        if (
            bounds[0] != 0
            or bounds[-1] != len(svc.ops)
            or ends != bounds[1:]
            or any(a >= b for a, b in itertools.pairwise(bounds))
        ):
            raise ConfigError(f"{where}: field 'stages': the ops ranges must cover "
                              f"0..{len(svc.ops)} of {svc.model} in order")  # fmt: skip
        for k, g in enumerate(gpus):
            if g not in net.gpus:
                raise ConfigError(f"{where}: stages[{k}].gpu: {g!r} is not a GPU of "
                                  f"{net.cluster.name}")  # fmt: skip
        for k, p in enumerate(paths):
            a, b = net.gpus[gpus[k]], net.gpus[gpus[k + 1]]
            bad = [x for x in p if x not in net.cluster.links]
            joined = all(x.split("->")[1] == y.split("->")[0] for x, y in itertools.pairwise(p))
            if bad or not p or p[0] != a.up or p[-1] != b.down or not joined:
                raise ConfigError(f"{where}: stages[{k}].path: expected links joining "
                                  f"{gpus[k]} to {gpus[k + 1]}")  # fmt: skip
        est = estimate(net, svc.ops, bounds, gpus, paths)
        p = Placement(svc, tuple(bounds), gpus, paths, est, float(s.get("cost", 0.0)),
                      str(s.get("method", "")))  # fmt: skip
        try:
            state.take(p)
        except ValueError as e:
            raise ConfigError(f"{where}: {e}") from None
        out.append(p)
    return out
