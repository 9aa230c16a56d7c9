"""``hetserve reproduce ppipe``: PPipe's evaluation (section 7.2, Figs. 6-8; section 7.4,
Fig. 10) on the simulator.

For every cluster and model group: plan the group with ``ppipe``, ``np`` and ``dart-r``
(same MILP, same SLOs, planning margin 0.4); load factor 1.0 is the *PPipe* plan's
capacity for the group (every model at once, by weight); each plan is served by the
reservation data plane. The load factor is swept on a grid (0.05 .. 1.0 in steps of 0.05,
as in the paper, 30 s per point) for the "Poisson" and "Bursty" workloads until every model
of the group has dipped below the target. A model's max load factor is the last grid point
before its attainment first drops below 99%; the group's is the mean over its models (the
paper's Fig. 6 metric). The ablation (Fig. 10) serves the PPipe plan with the ``reactive``
scheduler instead, on Poisson.

GPU temporal utilisation per class (Fig. 8) is measured at the group's max load factor
(the highest grid point at which the pooled attainment of the group is >= 99%): the busy
time of every worker slot, weighted by its share of its GPU, over the simulated time and
every GPU of that class in the cluster (GPUs the plan leaves idle count as 0).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hetserve.core.errors import HetserveError

# The paper's 18 CNNs (PPipe Table 2) and the zoo model that stands in for each. The paper
# names one group (G1: EfficientNet-B8, EncNet, RTMDet) and draws the others at random;
# ours keep G1 and give every group one recognition (or other), one detection and one
# segmentation model. The six segmentation models are all ResNet-101-D8 networks in
# OpenMMLab with different heads, so fcn-resnet101 stands in for each of them.
PAPER_MODELS: dict[str, str] = {
    "EfficientNet-B8": "efficientnet-b8",
    "ConvNeXt": "convnext-t",
    "GoogLeNet": "inception-v3",
    "RepVGG": "resnet50",
    "WideResNet": "resnet152",
    "Colorization-v2": "densenet121",
    "RTMDet": "resnet50-fpn",
    "ATSS": "resnet50-fpn",
    "CenterNet": "resnet18",
    "FSAF": "resnet50-fpn",
    "GFL": "resnet50-fpn",
    "EfficientDet": "efficientnet-b4",
    "EncNet": "fcn-resnet101",
    "APCNet": "fcn-resnet101",
    "DNLNet": "fcn-resnet101",
    "FCN": "fcn-resnet101",
    "GCNet": "fcn-resnet101",
    "NonLocalNet": "fcn-resnet101",
}
PAPER_GROUPS: dict[str, tuple[str, str, str]] = {
    "G1": ("EfficientNet-B8", "EncNet", "RTMDet"),
    "G2": ("ConvNeXt", "APCNet", "ATSS"),
    "G3": ("GoogLeNet", "DNLNet", "CenterNet"),
    "G4": ("RepVGG", "FCN", "FSAF"),
    "G5": ("WideResNet", "GCNet", "GFL"),
    "G6": ("Colorization-v2", "NonLocalNet", "EfficientDet"),
}
GROUPS: dict[str, tuple[str, ...]] = {
    g: tuple(PAPER_MODELS[m] for m in ms) for g, ms in PAPER_GROUPS.items()
}
CLUSTERS = ("hc1-l", "hc2-l", "hc3-l", "hc4-l")
PLANNERS = ("ppipe", "np", "dart-r")
# "Bursty": Gamma-renewal arrivals per model with inter-arrival CV 1.5 (Poisson's is 1.0):
# arrivals clump on the time scale of the SLOs while the long-run rate stays the target, as
# when the paper upscales the MAF 2021 trace. (A rate-modulated alternative,
# ``mmpp:ratio=1.5,high_s=2,low_s=2``, swings the rate between 0.8x and 1.2x the mean for
# seconds; no data plane can then exceed load factor 1/1.2 = 0.83 for long; see
# docs/reproduce.md.)
WORKLOADS = {"poisson": "poisson", "bursty": "gamma:cv=1.5"}
PAPER = {  # PPipe section 7.2 and 7.4
    "ppipe_max_lf": {"poisson": 0.965, "bursty": 0.903},
    "ppipe_over_np": {"poisson": 1.48, "bursty": 1.751},
    "ppipe_over_dart_r": {"poisson": 1.322, "bursty": 1.358},
    "low_class_util": {"ppipe": 0.736, "dart-r": 0.295, "np": 0.081},
    "ablation": {"reservation": 0.92, "reactive": 0.71},
}


@dataclass(frozen=True)
class StudyConfig:
    clusters: tuple[str, ...] = CLUSTERS
    groups: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: dict(GROUPS))
    planners: tuple[str, ...] = PLANNERS
    workloads: Mapping[str, str] = field(default_factory=lambda: dict(WORKLOADS))
    duration_s: float = 30.0
    lf_step: float = 0.05
    lf_max: float = 1.0
    target: float = 0.99
    slo_scale: float = 5.0
    slo_ref_gpu: str | None = "L4"
    slo_margin: float = 0.4
    profiles: str | None = None
    ablation_cluster: str | None = "hc2-l"  # the paper's Fig. 10; None: no ablation
    seed: int = 0

    def grid(self) -> list[float]:
        n = round(self.lf_max / self.lf_step)
        return [round(self.lf_step * (i + 1), 10) for i in range(n)]


def quick_config(profiles: str | None = None) -> StudyConfig:
    """One cluster, one group, 10 s per point: the whole study in a few minutes."""
    return StudyConfig(
        clusters=("hc1-l",),
        groups={"G1": GROUPS["G1"]},
        duration_s=10.0,
        profiles=profiles,
        ablation_cluster="hc1-l",
    )


# ---------------------------------------------------------------------------- one cell
@dataclass
class Cell:
    """One sweep: a cluster, a group, a plan (by planner), a workload, a scheduler."""

    cluster: str
    group: str
    planner: str
    workload: str
    scheduler: str = "reservation"
    curve: list[tuple[float, float, dict[str, float]]] = field(default_factory=list)
    max_lf_per_model: dict[str, float] = field(default_factory=dict)
    max_load_factor: float = 0.0
    group_lf: float = 0.0  # highest grid point with pooled attainment >= target
    utilization: dict[str, float] = field(default_factory=dict)  # "high"/"low" + types
    wall_s: float = 0.0


def _class_utilization(res: Any, cluster: Any, order: list[str]) -> dict[str, float]:
    """Per GPU type and per class: busy share-weighted slot time / (time x GPUs)."""
    counts = cluster.gpu_counts()
    busy: dict[str, float] = dict.fromkeys(counts, 0.0)
    for w, b in res.worker_busy_s.items():
        busy[res.worker_gpu[w]] = busy.get(res.worker_gpu[w], 0.0) + b / res.worker_share[w]
    t = res.end_s
    out = {g: busy[g] / (t * counts[g]) if t > 0 else 0.0 for g in counts}
    if len(order) >= 2:
        out["high"] = out[order[0]]
        out["low"] = out[order[-1]]
    return out


def _setup(
    cluster: str, models: Sequence[str], cfg: StudyConfig, plan: Any = None, max_batch: int = 8
) -> Any:
    from hetserve.engine.setup import build_setup

    return build_setup(cluster, list(models), profiles=cfg.profiles, plan=plan, max_batch=max_batch)


def plan_group(cluster: str, models: Sequence[str], planner: str, cfg: StudyConfig) -> Any:
    """The group's plan by ``planner`` (SLO = scale x batch-1 latency on the ref GPU)."""
    from hetserve.core.plan import slos_from_scale
    from hetserve.core.presets import load_cluster
    from hetserve.planning.ppipe import PlanOptions, plan_models

    opts: dict[str, Any] = {}
    if cfg.profiles is not None:  # plan over the shares and batch sizes the set has
        gpus = [g.name for g in load_cluster(cluster).gpu_types()]
        opts = _profiled_configs(cfg.profiles, models, gpus)
    base = _setup(cluster, models, cfg, max_batch=max(opts.get("batches", (8,))))
    try:
        slos = slos_from_scale(
            base.cluster, base.latency, base.models, cfg.slo_scale, cfg.slo_ref_gpu
        )
    except HetserveError:  # e.g. a profile set without the reference GPU: the fastest one
        slos = slos_from_scale(base.cluster, base.latency, base.models, cfg.slo_scale)
    return plan_models(
        base.cluster,
        base.latency,
        slos,
        options=PlanOptions(planner=planner, slo_margin=cfg.slo_margin, **opts),
    )


def _profiled_configs(profiles: str, models: Sequence[str], gpus: Sequence[str]) -> dict[str, Any]:
    """The shares and batch sizes profiled for every model on every GPU type it has."""
    from hetserve.core.profiles import ProfileSet

    ps = ProfileSet.read(profiles)
    shares: set[int] | None = None
    batches: set[int] | None = None
    for m in models:
        for g in gpus:
            cf = ps.configs(m, g)
            if not cf:
                continue
            s_, b_ = {c[0] for c in cf}, {c[1] for c in cf}
            shares = s_ if shares is None else shares & s_
            batches = b_ if batches is None else batches & b_
    if not shares or not batches:
        raise HetserveError(
            f"{profiles}: no share and batch size is profiled for every model of "
            f"{', '.join(models)} on the cluster's GPU types"
        )
    return {"shares": tuple(sorted(shares)), "batches": tuple(sorted(batches))}


def run_cell(cell: Cell, models: Sequence[str], plan: Any, ref_plan: Any, cfg: StudyConfig) -> Cell:
    """Sweep the load factor for one cell (rates from ``ref_plan``, PPipe's, at each LF)."""
    import time

    from hetserve.core.outcome import OK
    from hetserve.experiments.setup import build_trace, simulate
    from hetserve.planning.ppipe import gpu_class_order
    from hetserve.sim.engine import SimConfig

    t0 = time.perf_counter()
    setup = _setup(cell.cluster, models, cfg, plan)
    order = gpu_class_order(setup.cluster)
    spec = cfg.workloads[cell.workload]
    crossed: dict[str, float] = {}
    best_util: dict[str, float] = {}
    group_crossed = False
    for lf in cfg.grid():
        trace = build_trace(setup, spec, ref_plan.rates_at(lf), cfg.duration_s, cfg.seed)
        res = simulate(setup, cell.scheduler, trace, None, SimConfig(seed=cfg.seed))
        names = res.models
        ok = res.outcome == OK
        per = {m: float(ok[names == m].mean()) if (names == m).any() else 1.0 for m in models}
        pooled = float(ok.mean()) if len(ok) else 1.0
        cell.curve.append((lf, pooled, per))
        for m in models:
            if m not in crossed and per[m] < cfg.target:
                crossed[m] = max_before_dip([(x, p[m]) for x, _, p in cell.curve], cfg.target)
        if pooled < cfg.target:
            group_crossed = True
        elif not group_crossed:
            cell.group_lf = lf
            best_util = _class_utilization(res, setup.cluster, order)
        if len(crossed) == len(models):
            break
    cell.max_lf_per_model = {
        m: crossed.get(m, max_before_dip([(x, p[m]) for x, _, p in cell.curve], cfg.target))
        for m in models
    }
    cell.max_load_factor = statistics.fmean(cell.max_lf_per_model.values())
    cell.utilization = best_util
    cell.wall_s = time.perf_counter() - t0
    return cell


def max_before_dip(points: Sequence[tuple[float, float]], target: float) -> float:
    """The highest load factor of an ascending sweep before attainment first drops below
    ``target`` (0.0 if the first point already misses it)."""
    best = 0.0
    for lf, att in points:
        if att < target:
            break
        best = lf
    return best


# ---------------------------------------------------------------------------- the study
def _run_cell_job(args: tuple[Cell, Sequence[str], Any, Any, StudyConfig]) -> Cell:
    return run_cell(*args)


def run_study(
    cfg: StudyConfig,
    jobs: int = 1,
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, Any]:
    """Plan, sweep every cell (in ``jobs`` processes), and collect ``results.json``."""
    from hetserve.core.presets import load_cluster

    for c in cfg.clusters:
        load_cluster(c)  # unknown names fail here, with suggestions
    plans: dict[tuple[str, str, str], Any] = {}
    for c in cfg.clusters:
        for g, models in cfg.groups.items():
            for p in cfg.planners:
                plans[(c, g, p)] = plan_group(c, models, p, cfg)
                if progress:
                    progress(f"planned {c} {g} {p}", 0, 0)
    if "ppipe" not in cfg.planners:
        for c in cfg.clusters:
            for g, models in cfg.groups.items():
                plans[(c, g, "ppipe")] = plan_group(c, models, "ppipe", cfg)
    cells: list[tuple[Cell, Sequence[str], Any, Any, StudyConfig]] = []
    for c in cfg.clusters:
        for g, models in cfg.groups.items():
            ref = plans[(c, g, "ppipe")]
            for p in cfg.planners:
                for wl in cfg.workloads:
                    cells.append((Cell(c, g, p, wl), models, plans[(c, g, p)], ref, cfg))
            if cfg.ablation_cluster == c:
                wl = "poisson" if "poisson" in cfg.workloads else next(iter(cfg.workloads))
                cells.append((Cell(c, g, "ppipe", wl, "reactive"), models, ref, ref, cfg))
    from hetserve.experiments.jobs import parallel_map

    done = parallel_map(_run_cell_job, cells, jobs, progress, _label)
    return collect(cfg, done, plans)


def _label(c: Cell) -> str:
    sched = "" if c.scheduler == "reservation" else f" ({c.scheduler})"
    return (
        f"{c.cluster} {c.group} {c.planner}{sched} {c.workload}: "
        f"max load factor {c.max_load_factor:.3f} ({c.wall_s:.0f} s)"
    )


def _mean_or_none(xs: Any) -> float | None:
    vals = [x for x in xs if x is not None]
    return statistics.fmean(vals) if vals else None


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def collect(cfg: StudyConfig, cells: Sequence[Cell], plans: Mapping[tuple, Any]) -> dict[str, Any]:
    """results.json: ``{cluster: {group: {planner: {workload: max_load_factor}}}}`` at the
    top level, plus the keys ``per_model``, ``utilization``, ``curves``, ``ablation``,
    ``capacity_rps``, ``summary``, ``paper`` and ``config``."""
    out: dict[str, Any] = {}
    per_model: dict[str, Any] = {}
    util: dict[str, Any] = {}
    curves: dict[str, Any] = {}
    ablation: dict[str, Any] = {}
    for c in sorted(cells, key=lambda x: (x.cluster, x.group, x.planner, x.workload)):
        if c.scheduler != "reservation":
            a = ablation.setdefault(c.cluster, {}).setdefault(c.group, {})
            a["workload"] = c.workload
            a["reactive"] = c.max_load_factor
            a["reactive_curve"] = c.curve
            continue
        for d, v in (
            (out, c.max_load_factor),
            (per_model, c.max_lf_per_model),
            (util, {"at_load_factor": c.group_lf, **c.utilization}),
            (curves, c.curve),
        ):
            d.setdefault(c.cluster, {}).setdefault(c.group, {}).setdefault(c.planner, {})[
                c.workload
            ] = v
    for cl, groups in ablation.items():
        for g, a in groups.items():
            a["reservation"] = out.get(cl, {}).get(g, {}).get("ppipe", {}).get(a["workload"])
    summary: dict[str, Any] = {}
    for wl in cfg.workloads:
        row: dict[str, Any] = {}
        for p in cfg.planners:
            vals = [out[c][g][p][wl] for c in out for g in out[c] if p in out[c][g]]
            row[f"{p}_mean_max_lf"] = statistics.fmean(vals) if vals else None
        for base in ("np", "dart-r"):
            if base in cfg.planners and "ppipe" in cfg.planners:
                per_cluster = {}
                for cl in out:
                    pp = statistics.fmean(out[cl][g]["ppipe"][wl] for g in out[cl])
                    bb = statistics.fmean(out[cl][g][base][wl] for g in out[cl])
                    per_cluster[cl] = _ratio(pp, bb)
                vals = [v for v in per_cluster.values() if v is not None]
                row[f"ppipe_over_{base.replace('-', '_')}"] = (
                    statistics.fmean(vals) if vals else None
                )
                row[f"ppipe_over_{base.replace('-', '_')}_per_cluster"] = per_cluster
        summary[wl] = row
    summary["low_class_utilization_poisson"] = {
        p: _mean_or_none(
            u.get(p, {}).get("poisson", {}).get("low")
            for by_g in util.values()
            for u in by_g.values()
        )
        for p in cfg.planners
    }
    abl = [(a["reservation"], a["reactive"]) for g in ablation.values() for a in g.values()]
    if abl:
        summary["ablation"] = {
            "reservation": _mean_or_none(x for x, _ in abl),
            "reactive": _mean_or_none(y for _, y in abl),
        }
    cap: dict[str, Any] = {}
    for (c, g, p), plan in plans.items():
        cap.setdefault(c, {}).setdefault(g, {})[p] = plan.capacity_rps()
    conf = asdict(cfg)
    conf["groups"] = {g: list(m) for g, m in cfg.groups.items()}
    conf["grid"] = cfg.grid()
    return {
        **out,
        "per_model": per_model,
        "utilization": util,
        "curves": curves,
        "ablation": ablation,
        "capacity_rps": cap,
        "summary": summary,
        "paper": PAPER,
        "config": conf,
    }


RESERVED_KEYS = (
    "per_model",
    "utilization",
    "curves",
    "ablation",
    "capacity_rps",
    "summary",
    "paper",
    "config",
    "provenance",  # added by report.write_results
)


def clusters_of(results: Mapping[str, Any]) -> list[str]:
    return [k for k in results if k not in RESERVED_KEYS]


def summary_rows(results: Mapping[str, Any]) -> list[list[str]]:
    """The printed table: per cluster and workload, each planner's mean max load factor
    over the groups and the PPipe/NP, PPipe/DART-r ratios."""
    rows = []
    workloads = list(results["config"]["workloads"])
    planners = list(results["config"]["planners"])
    for cl in clusters_of(results):
        for wl in workloads:
            means = {
                p: statistics.fmean(results[cl][g][p][wl] for g in results[cl]) for p in planners
            }
            r = [cl, wl] + [f"{means[p]:.3f}" for p in planners]
            for base in ("np", "dart-r"):
                x = _ratio(means.get("ppipe", 0.0), means.get(base, 0.0))
                r.append("-" if x is None or base not in means else f"{x:.2f}x")
            rows.append(r)
    return rows


def write_results(results: Mapping[str, Any], out_dir: str | Path) -> Path:
    from hetserve.experiments.report import write_results as write

    return write(results, out_dir)
