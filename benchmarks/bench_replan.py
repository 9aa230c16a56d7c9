"""Benchmark: a re-plan's solve time (issue 40): what the control loop waits for.

For each of bench_planner's instances (hc1-l .. hc4-l, two trios of zoo models, roofline
profiles, 2 stages, SLO 5 x the L4 batch-1 latency, margin 0.4): the throughput
objective's plan for a mix that moved (weights 0.6, 0.3, 0.1), and the cost objective's
plan for those rates at half that plan's capacity (25% headroom); each cold (HiGHS given
no starting point) and warm (``PlanOptions.start``: the throughput re-plan starts from the
plan for equal weights, the one being served; the cost re-plan from the throughput
plan, which is infeasible as a start where it holds fewer GPUs than the demand needs
and is then left out). Every instance is printed.

    python benchmarks/bench_replan.py
"""

from __future__ import annotations

import statistics
import time

from hetserve.core.latency import RooflineModel
from hetserve.core.plan import slos_from_scale
from hetserve.core.presets import load_cluster
from hetserve.core.provenance import provenance_line
from hetserve.planning.ppipe import PlanOptions, plan_models

TRIOS = [
    ["resnet50", "efficientnet-b4", "densenet121"],
    ["efficientnet-b8", "resnet152", "convnext-t"],
]
MIX = (0.6, 0.3, 0.1)


def main() -> None:
    print(provenance_line())
    rm = RooflineModel()
    times: dict[str, list[float]] = {k: [] for k in ("throughput", "warm", "cost", "cost warm")}
    for name in ("hc1-l", "hc2-l", "hc3-l", "hc4-l"):
        c = load_cluster(name)
        for models in TRIOS:
            slos = slos_from_scale(c, rm, models, 5.0, "L4")
            w = dict(zip(models, MIX, strict=True))
            # the plan being served: equal weights (its re-plan is for the moved mix)
            before = plan_models(c, rm, slos, None, PlanOptions(time_limit_s=60))
            t0 = time.perf_counter()
            p = plan_models(c, rm, slos, w, PlanOptions(time_limit_s=60))
            t_thr = time.perf_counter() - t0
            t0 = time.perf_counter()
            pw = plan_models(c, rm, slos, w, PlanOptions(time_limit_s=60, start=before))
            t_warm = time.perf_counter() - t0
            rates = tuple((m, 0.5 * p.models[m].throughput_rps) for m in models)
            t0 = time.perf_counter()
            q = plan_models(c, rm, slos, w, PlanOptions(objective="cost", rates_rps=rates))
            t_cost = time.perf_counter() - t0
            t0 = time.perf_counter()
            qw = plan_models(c, rm, slos, w, PlanOptions(objective="cost", rates_rps=rates,
                                                         start=p))  # fmt: skip
            t_cwarm = time.perf_counter() - t0
            for k, v in zip(times, (t_thr, t_warm, t_cost, t_cwarm), strict=True):
                times[k].append(v)
            ratio = pw.meta["objective"]["normalized_rps"] / p.meta["objective"]["normalized_rps"]
            print(
                f"{name:<6} {'+'.join(models):<42} throughput {t_thr:6.2f} s "
                f"({p.meta['solve']['status']}), warm {t_warm:6.2f} s "
                f"({ratio:.4f} of cold's objective); cost {t_cost:6.2f} s "
                f"({q.meta['solve']['status']}, {q.meta['objective']['cost_per_hour']:.0f} "
                f"GPUs of {sum(c.gpu_counts().values())}), warm {t_cwarm:6.2f} s "
                f"({qw.meta['objective']['cost_per_hour']:.0f})",
                flush=True,
            )
    for k, v in times.items():
        print(f"{k}: median {statistics.median(v):.2f} s, max {max(v):.2f} s "
              f"(planning included: candidates and the MILP)")  # fmt: skip


if __name__ == "__main__":
    main()
