"""``hetserve reproduce verdicts``: the headline comparisons of docs/reproduce.md over
several seeds, each reported as the mean and the spread (min..max over seeds) of both
sides and of their difference, with a verdict that calls a difference inside the spread or
below the measurement's grid step a tie.

Every comparison re-runs, per seed, the point of its study the headline is read from (the
seed draws the arrivals, the request sequence, the random streams or the colony):

- ``ppipe_over_np``: PPipe's and NP's max load factor at 99% attainment on ``hc1-l``,
  Poisson, mean over groups (the only cluster where the plans differ much; grid step 0.05);
- ``reservation_over_reactive``: PPipe's plan served by ``reservation`` and by
  ``reactive`` on ``hc2-l``, the groups whose plans have multi-stage pipelines (G1, G2);
- ``flex_over_clockwork_<workload>``: Shepherd's goodput at the highest load;
- ``ptdha_over_pipeswitch``: DeepPlan's Fig. 13 goodput at 180 BERT-Base instances;
- ``rampa_over_ncar``: services placed by RAMPA and by NCAR's best of the sampled stage-
  count combinations on ``rampa-base``, same demand;
- ``magicbatch_over_tfserving``: MagicBatch's and TF-Serving's simulated energy, mean over
  the stream counts (less is better).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hetserve.experiments.deepplan import study as DP
from hetserve.experiments.magicbatch import study as MB
from hetserve.experiments.ppipe import study as PP
from hetserve.experiments.rampa import study as RA
from hetserve.experiments.shepherd import study as SH


@dataclass(frozen=True)
class VerdictConfig:
    seeds: tuple[int, ...] = (0, 1, 2)
    ppipe: PP.StudyConfig = field(default_factory=PP.StudyConfig)
    ppipe_cluster: str = "hc1-l"
    ppipe_groups: tuple[str, ...] = tuple(PP.GROUPS)
    ablation_cluster: str = "hc2-l"
    ablation_groups: tuple[str, ...] = ("G1", "G2")
    shepherd: SH.ShepherdConfig = field(default_factory=SH.ShepherdConfig)
    deepplan: DP.DeepPlanConfig = field(
        default_factory=lambda: DP.DeepPlanConfig(fig13_instances=(180,), fig13_slos_ms=(100.0,))
    )
    rampa: RA.RampaConfig = field(
        default_factory=lambda: RA.RampaConfig(clusters=("rampa-base",), cases=(1,), combos=12)
    )
    magicbatch: MB.MagicBatchConfig = field(default_factory=MB.MagicBatchConfig)


# name -> (side A, side B, higher is better, grid step of the measure)
HEADLINES: dict[str, tuple[str, str, bool, float]] = {
    "ppipe_over_np": ("PPipe", "NP", True, 0.05),
    "reservation_over_reactive": ("reservation", "reactive", True, 0.05),
    "flex_over_clockwork_maf-stable": ("FLEX", "Clockwork", True, 0.0),
    "flex_over_clockwork_maf-bursty": ("FLEX", "Clockwork", True, 0.0),
    "ptdha_over_pipeswitch": ("PT+DHA", "PipeSwitch", True, 0.0),
    "rampa_over_ncar": ("RAMPA", "NCAR", True, 1.0),
    "magicbatch_over_tfserving": ("MagicBatch", "TF-Serving", False, 0.0),
}


def describe(cfg: VerdictConfig) -> dict[str, str]:
    """What each headline compares, in this configuration's words."""
    top = max(cfg.shepherd.loads_rps)
    dp = cfg.deepplan
    return {
        "ppipe_over_np": f"max load factor, {cfg.ppipe_cluster}, Poisson, mean over "
        f"{', '.join(cfg.ppipe_groups)}",
        "reservation_over_reactive": f"max load factor of PPipe's plan, {cfg.ablation_cluster}, "
        f"{', '.join(cfg.ablation_groups)}, Poisson",
        "flex_over_clockwork_maf-stable": f"goodput req/s at {top:g} req/s, MAF stable",
        "flex_over_clockwork_maf-bursty": f"goodput req/s at {top:g} req/s, MAF bursty",
        "ptdha_over_pipeswitch": f"Fig. 13 goodput at {dp.fig13_instances[-1]} instances, "
        f"SLO {dp.fig13_slos_ms[0]:g} ms",
        "rampa_over_ncar": f"services placed, {cfg.rampa.clusters[0]}, case "
        f"{cfg.rampa.cases[0]} (NCAR: best of {cfg.rampa.combos} combinations)",
        "magicbatch_over_tfserving": "energy of the batches J, mean over "
        f"{', '.join(map(str, cfg.magicbatch.stream_counts))} streams",
    }


def tasks(cfg: VerdictConfig) -> list[tuple]:
    """One job per (kind, seed, what): the slowest kinds first."""
    out: list[tuple] = []
    for s in cfg.seeds:
        out += [("ppipe", s, (cfg.ppipe_cluster, g, p, "reservation"))
                for g in cfg.ppipe_groups for p in ("ppipe", "np")]  # fmt: skip
        out += [("ppipe", s, (cfg.ablation_cluster, g, "ppipe", sch))
                for g in cfg.ablation_groups for sch in ("reservation", "reactive")]  # fmt: skip
        out += [("shepherd", s, (wl, name)) for wl in SH.WORKLOADS
                for name in ("flex", "clockwork")]  # fmt: skip
        out += [("rampa", s, ("rampa", -1))]
        n = len(RA.combinations(cfg.rampa.combos, s))
        out += [("rampa", s, ("ncar", i)) for i in range(n)]
        out += [("magicbatch", s, n) for n in cfg.magicbatch.stream_counts]
        out += [("deepplan", s, None)]
    return out


def run_task(t: tuple, cfg: VerdictConfig) -> tuple[tuple, Any]:
    kind, seed, what = t
    if kind == "ppipe":
        cluster, group, planner, scheduler = what
        pcfg = dataclasses.replace(cfg.ppipe, seed=seed)
        models = PP.GROUPS[group]
        plan = PP.plan_group(cluster, models, planner, pcfg)
        ref = plan if planner == "ppipe" else PP.plan_group(cluster, models, "ppipe", pcfg)
        cell = PP.Cell(cluster, group, planner, "poisson", scheduler)
        return t, PP.run_cell(cell, models, plan, ref, pcfg).max_load_factor
    if kind == "shepherd":
        wl, name = what
        scfg = dataclasses.replace(cfg.shepherd, seed=seed)
        _, r = SH.run_point(("load", wl, name, max(scfg.loads_rps)), scfg)
        return t, r["goodput_rps"]
    if kind == "deepplan":
        from hetserve.core.presets import load_cluster

        dcfg = dataclasses.replace(cfg.deepplan, seed=seed, kinds=("pipeswitch", "pt+dha"))
        f13 = DP.run_fig13(dcfg, load_cluster(dcfg.cluster))
        per = next(iter(f13.values()))
        return t, {k: pts[-1][2] for k, pts in per.items()}
    if kind == "rampa":
        method, ci = what
        rcfg = dataclasses.replace(cfg.rampa, seed=seed)
        _, r = RA.run_one((method, rcfg.clusters[0], rcfg.cases[0], ci), rcfg)
        return t, r["placed"]
    if kind == "magicbatch":
        from hetserve.core.latency import RooflineModel
        from hetserve.planning.magicbatch import random_streams

        mcfg = dataclasses.replace(cfg.magicbatch, seed=seed)
        cluster = MB.edge_cluster(mcfg.gpus_per_type)
        lat = RooflineModel(catalog=cluster.catalog)
        s = mcfg.seed * 1000 + what
        streams = random_streams(what, mcfg.models, s)
        mb, _ = MB.plan_method("pso-ga", streams, cluster, lat, s)
        tf, _ = MB.plan_method("fcfs", streams, cluster, lat, s)
        tf_params = {"max_batch": mcfg.tf_batch, "max_queue_delay_s": mcfg.tf_timeout_ms / 1e3}
        a = MB.simulate_plan(mb, cluster, lat, "magicbatch", {}, mcfg.duration_s, s)
        b = MB.simulate_plan(tf, cluster, lat, "fixed-batch", tf_params, mcfg.duration_s, s)
        return t, (a["energy_j"], b["energy_j"])
    raise ValueError(f"unknown task {t!r}")


def _job(args: tuple[tuple, VerdictConfig]) -> tuple[tuple, Any]:
    return run_task(*args)


def run_verdicts(
    cfg: VerdictConfig, jobs: int = 1, progress: Callable[[str, int, int], None] | None = None
) -> dict[str, Any]:
    from hetserve.experiments.jobs import parallel_map

    items = [(t, cfg) for t in tasks(cfg)]
    done = dict(parallel_map(_job, items, jobs, progress, lambda r: _label(r[0])))
    return collect(cfg, done)


def _label(t: tuple) -> str:
    return " ".join(str(x) for x in t if x is not None)


def collect(cfg: VerdictConfig, done: Mapping[tuple, Any]) -> dict[str, Any]:
    """Per headline: per seed both sides, then the verdict."""
    pairs: dict[str, list[tuple[float, float]]] = {k: [] for k in HEADLINES}
    mean = statistics.fmean
    for s in cfg.seeds:
        pp = {p: mean(done[("ppipe", s, (cfg.ppipe_cluster, g, p, "reservation"))]
                      for g in cfg.ppipe_groups) for p in ("ppipe", "np")}  # fmt: skip
        pairs["ppipe_over_np"].append((pp["ppipe"], pp["np"]))
        ab = {}
        for sch in ("reservation", "reactive"):
            ab[sch] = mean(
                done[("ppipe", s, (cfg.ablation_cluster, g, "ppipe", sch))]
                for g in cfg.ablation_groups
            )
        pairs["reservation_over_reactive"].append((ab["reservation"], ab["reactive"]))
        for wl in SH.WORKLOADS:
            pairs[f"flex_over_clockwork_{wl}"].append(
                (done[("shepherd", s, (wl, "flex"))], done[("shepherd", s, (wl, "clockwork"))])
            )
        g = done[("deepplan", s, None)]
        pairs["ptdha_over_pipeswitch"].append((g["pt+dha"], g["pipeswitch"]))
        n = len(RA.combinations(cfg.rampa.combos, s))
        ncar = max(done[("rampa", s, ("ncar", i))] for i in range(n))
        pairs["rampa_over_ncar"].append((done[("rampa", s, ("rampa", -1))], ncar))
        e = [done[("magicbatch", s, n)] for n in cfg.magicbatch.stream_counts]
        pairs["magicbatch_over_tfserving"].append((mean(x[0] for x in e), mean(x[1] for x in e)))
    what = describe(cfg)
    out = {name: {"what": what[name], **verdict(name, pairs[name], list(cfg.seeds))}
           for name in HEADLINES}  # fmt: skip
    return {"seeds": list(cfg.seeds), "headlines": out}


def verdict(name: str, pairs: Sequence[tuple[float, float]], seeds: list[int]) -> dict[str, Any]:
    """Both sides and their difference (A - B) per seed, mean and spread, and the verdict:
    A (or B) ahead only when the difference has the same sign on every seed and its
    smallest size is at least the measure's grid step; otherwise a tie."""
    a_name, b_name, higher_better, step = HEADLINES[name]
    a = [float(x) for x, _ in pairs]
    b = [float(y) for _, y in pairs]
    d = [x - y for x, y in pairs]
    sign = 1.0 if higher_better else -1.0
    gain = [sign * x for x in d]  # > 0: A better
    tol = max(step, 1e-12)
    if min(gain) >= tol:
        call = f"{a_name} ahead on every seed"
    elif max(gain) <= -tol:
        call = f"{b_name} ahead on every seed"
    else:
        call = "tie: the difference changes sign across seeds or is within the grid step"
    return {
        "a": a_name, "b": b_name, "higher_is_better": higher_better,
        "grid_step": step, "seeds": seeds, "a_values": a, "b_values": b,
        "a_mean": statistics.fmean(a), "b_mean": statistics.fmean(b),
        "diff_mean": statistics.fmean(d), "diff_min": min(d), "diff_max": max(d),
        "ratio_mean": statistics.fmean(x / y for x, y in pairs) if all(b) else None,
        "verdict": call,
    }  # fmt: skip


def summary_rows(results: Mapping[str, Any]) -> list[list[str]]:
    rows = []
    for h in results["headlines"].values():
        rows.append([
            h["what"],
            f"{h['a']} {h['a_mean']:.4g} ({min(h['a_values']):.4g}..{max(h['a_values']):.4g})",
            f"{h['b']} {h['b_mean']:.4g} ({min(h['b_values']):.4g}..{max(h['b_values']):.4g})",
            f"{h['diff_mean']:+.4g} ({h['diff_min']:+.4g}..{h['diff_max']:+.4g})",
            h["verdict"],
        ])  # fmt: skip
    return rows


def quick_config(seeds: tuple[int, ...] = (0, 1, 2)) -> VerdictConfig:
    """Every headline at a small scale (minutes on 2 cores): what the test runs, and a
    first look; the documented figures come from the default configuration."""
    return VerdictConfig(
        seeds=seeds,
        ppipe=dataclasses.replace(PP.StudyConfig(), duration_s=5.0, lf_step=0.1),
        ppipe_groups=("G1",),
        ablation_cluster="hc1-l",
        ablation_groups=("G1",),
        shepherd=dataclasses.replace(SH.quick_config(), n_streams=100, duration_s=5.0),
        deepplan=DP.DeepPlanConfig(
            fig13_instances=(180,), fig13_slos_ms=(100.0,), fig13_duration_s=5.0
        ),
        rampa=RA.RampaConfig(clusters=("rampa-base",), cases=(1,), combos=2, max_requests=20),
        magicbatch=dataclasses.replace(
            MB.MagicBatchConfig(), gpus_per_type=2, stream_counts=(3, 6), duration_s=5.0
        ),
    )
