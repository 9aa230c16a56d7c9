"""The roofline estimate against a card's measured profile set (issue 43, items 3 and 7).

For every (model, batch, block) of a measured folder (``hetserve profile measure --device
cuda``), the roofline model's estimate for the same GPU type, block bounds and batch:

- **latency**: the error per block (estimate / measured - 1) and per model, its median and
  worst; then a calibration where the error is systematic: the roofline's compute and
  memory efficiencies scaled and its per-operator launch cost refitted (three numbers,
  least squares on log ratios), checked model by model with that model left out of the fit
  (leave-one-model-out: the error a model the fit never saw would get);
- **energy per request** against batch size: measured (the sum of the blocks' NVML
  energy / batch) beside the energy model's prediction (the roofline's busy power times
  its time), per model.

The measurement is of the zoo's FP32 models in eager PyTorch (TF32 off for matrix
products, cuDNN's default TF32 on for convolutions); the roofline's spec-sheet peak is the
card's FP16 tensor rate, so part of the error is the precision, which the calibration
absorbs into the efficiencies.

Run: ``.venv/bin/python benchmarks/roofline_vs_card.py
src/hetserve/data/profiles/h200 [--plot docs/results/profiles/h200-roofline.png]``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from dataclasses import replace
from pathlib import Path

import numpy as np

from hetserve.core.latency import RooflineModel, RooflineParams
from hetserve.core.profiles import ProfileSet
from hetserve.core.provenance import provenance_line


def estimates(ps: ProfileSet, params: RooflineParams) -> dict[tuple, list[float]]:
    rm = RooflineModel(params=params)
    out = {}
    for (m, g, s, b), meas in ps.latency_us.items():
        out[(m, g, s, b)] = [
            rm.latency(m, g, s, b, range(i, i + 1)) * 1e6 for i in range(len(meas))
        ]
    return out


def errors(ps: ProfileSet, est: dict, models: set[str] | None = None) -> dict[str, list[float]]:
    """Per model: estimate / measured - 1 of every (batch, block)."""
    by: dict[str, list[float]] = {}
    for key, meas in ps.latency_us.items():
        if models is not None and key[0] not in models:
            continue
        by.setdefault(key[0], []).extend(e / t - 1 for e, t in zip(est[key], meas, strict=True))
    return by


def summary(by: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    out = {}
    for m, errs in sorted(by.items()):
        a = [abs(e) for e in errs]
        out[m] = {"median_abs_pct": 100 * statistics.median(a), "worst_abs_pct": 100 * max(a),
                  "median_signed_pct": 100 * statistics.median(errs)}  # fmt: skip
    allerr = [abs(e) for errs in by.values() for e in errs]
    out["all"] = {"median_abs_pct": 100 * statistics.median(allerr),
                  "worst_abs_pct": 100 * max(allerr),
                  "median_signed_pct": 100 * statistics.median(
                      [e for errs in by.values() for e in errs])}  # fmt: skip
    return out


def scaled(base: RooflineParams, x: np.ndarray) -> RooflineParams:
    c, mem, launch = (math.exp(v) for v in x)
    return replace(
        base,
        eff_kind={k: min(1.0, v * c) for k, v in base.eff_kind.items()},
        eff_default=min(1.0, base.eff_default * c),
        eff_mem=min(1.0, base.eff_mem * mem),
        launch_s=base.launch_s * launch,
    )


def fit(ps: ProfileSet, models: set[str], base: RooflineParams) -> np.ndarray:
    """The three log-scale factors that minimise the squared log error on ``models``."""
    from scipy.optimize import least_squares

    keys = [k for k in ps.latency_us if k[0] in models]

    def resid(x: np.ndarray) -> np.ndarray:
        rm = RooflineModel(params=scaled(base, x))
        r = []
        for m, g, s, b in keys:
            for i, t in enumerate(ps.latency_us[(m, g, s, b)]):
                r.append(math.log(rm.latency(m, g, s, b, range(i, i + 1)) * 1e6 / t))
        return np.array(r)

    return least_squares(resid, np.zeros(3), bounds=([-4, -4, -4], [4, 4, 6])).x


def energy_rows(ps: ProfileSet, params: RooflineParams) -> list[dict]:
    if not ps.energy_mj:
        return []
    rm = RooflineModel(params=params)
    rows = []
    for (m, g, s, b), mj in sorted(ps.energy_mj.items()):
        n = len(mj)
        pred_j = rm.energy(m, g, s, b, range(n))
        pred_s = rm.latency(m, g, s, b, range(n))
        meas_s = sum(ps.latency_us[(m, g, s, b)]) / 1e6
        rows.append({
            "model": m, "gpu": g, "batch": b,
            "measured_mj_per_request": sum(mj) / b, "predicted_mj_per_request": pred_j * 1e3 / b,
            "measured_avg_power_w": sum(mj) / 1e3 / meas_s,
            "predicted_avg_power_w": pred_j / pred_s,
        })  # fmt: skip
    return rows


def plot(ps: ProfileSet, before: dict, after: dict, erows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
    lines, energy = {}, {}
    for m in sorted({k[0] for k in ps.latency_us}):
        keys = sorted(k for k in ps.latency_us if k[0] == m)
        lines[m] = [(k[3], sum(ps.latency_us[k]) / 1e3, sum(after[k]) / 1e3) for k in keys]
        rs = [r for r in erows if r["model"] == m]
        if rs:
            energy[m] = [(r["batch"], r["measured_mj_per_request"],
                          r["predicted_mj_per_request"]) for r in rs]  # fmt: skip
    _panel(a1, lines, "whole model, ms (dashed: calibrated roofline)")
    _panel(a2, energy, "energy per request, mJ (dashed: energy model)")
    gpu = next(iter(ps.latency_us))[1]
    fig.suptitle(
        f"{gpu}: measured (NVML, PyTorch eager FP32) against the roofline and energy model"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def _panel(ax, series, ylabel):  # type: ignore[no-untyped-def]
    """Per model, measured (dots) and the model's prediction (dashed, same colour)
    against the batch size, both axes logarithmic."""
    for m, pts in series.items():
        xs = [p[0] for p in pts]
        ax.plot(xs, [p[1] for p in pts], "o-", label=f"{m} measured")
        ax.plot(xs, [p[2] for p in pts], "--", color=ax.lines[-1].get_color(), alpha=0.7)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7)


def main() -> None:
    print(provenance_line())
    ap = argparse.ArgumentParser()
    ap.add_argument("folder")
    ap.add_argument("--plot", default=None)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    ps = ProfileSet.read(Path(a.folder))
    base = RooflineParams()
    models = {k[0] for k in ps.latency_us}
    before = estimates(ps, base)
    s_before = summary(errors(ps, before))
    x_all = fit(ps, models, base)
    after = estimates(ps, scaled(base, x_all))
    s_after = summary(errors(ps, after))
    held: dict[str, list[float]] = {}
    for m in sorted(models):
        x = fit(ps, models - {m}, base)
        held |= errors(ps, estimates(ps, scaled(base, x)), {m})
    s_held = summary(held)
    erows = energy_rows(ps, base)
    c, mem, launch = (math.exp(v) for v in x_all)
    print(
        f"calibration on all models: compute efficiency x{c:.3f}, memory efficiency "
        f"x{mem:.3f}, launch cost x{launch:.2f} ({base.launch_s * launch * 1e6:.1f} us/op)"
    )
    print(
        "| model | before: median abs / worst / median signed | calibrated (all) | "
        "calibrated, model left out of the fit |"
    )
    print("|---|---:|---:|---:|")
    for m in [*sorted(models), "all"]:
        row = [
            f"{d[m]['median_abs_pct']:.0f}% / {d[m]['worst_abs_pct']:.0f}% / "
            f"{d[m]['median_signed_pct']:+.0f}%"
            for d in (s_before, s_after, s_held)
        ]
        print(f"| {m} | " + " | ".join(row) + " |")
    if erows:
        print(
            "\n| model | batch | measured mJ/request | predicted mJ/request | ratio | measured W |"
        )
        print("|---|---:|---:|---:|---:|---:|")
        for r in erows:
            print(f"| {r['model']} | {r['batch']} | {r['measured_mj_per_request']:.2f} | "
                  f"{r['predicted_mj_per_request']:.2f} | "
                  f"{r['predicted_mj_per_request'] / r['measured_mj_per_request']:.2f} | "
                  f"{r['measured_avg_power_w']:.0f} | "
                  f"{r['predicted_avg_power_w']:.0f} |")  # fmt: skip
    if a.plot:
        plot(ps, before, after, erows, Path(a.plot))
        print(f"wrote {a.plot}")
    if a.json:
        Path(a.json).write_text(json.dumps({
            "before": s_before, "calibrated": s_after, "held_out": s_held,
            "factors": {"compute_eff": c, "mem_eff": mem, "launch": launch}, "energy": erows,
        }, indent=1) + "\n")  # fmt: skip


if __name__ == "__main__":
    main()
