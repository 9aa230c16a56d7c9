"""``hetserve report DIR``: an HTML page with embedded PNG plots of a run or a sweep.

Reads whatever the folder holds: ``summary.json`` (utilisation per GPU type, batch sizes),
``requests.csv`` (latency CDF per model), ``batches.csv`` (per-worker timeline, like PPipe
Fig. 12), ``sweep.json`` (attainment vs load factor per scheduler).
"""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from hetserve.core.errors import HetserveError
from hetserve.core.files import read_json


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    pyplot().close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def plot_sweep(sweep: dict[str, Any]) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for name, r in sweep.items():
        if not isinstance(r, dict) or "curve" not in r:
            continue
        xs, ys = zip(*r["curve"], strict=True) if r["curve"] else ((), ())
        ax.plot(xs, [100 * y for y in ys], "o-", label=f"{name} (max {r['max_load_factor']:.2f})")
    ax.axhline(99, color="grey", ls=":", lw=1)
    ax.set_xlabel("load factor (offered rate / planned capacity)")
    ax.set_ylabel("SLO attainment (%)")
    ax.set_title("attainment vs load factor")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return save_png(fig)


def plot_latency_cdf(rows: list[dict[str, str]]) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.8))
    by_model: dict[str, list[float]] = {}
    for r in rows:
        if r["latency_ms"]:
            by_model.setdefault(r["model"], []).append(float(r["latency_ms"]))
    for m, v in sorted(by_model.items()):
        x = np.sort(np.asarray(v))
        ax.plot(x, np.arange(1, len(x) + 1) / len(x), label=m)
    ax.set_xlabel("latency of completed requests (ms)")
    ax.set_ylabel("CDF")
    ax.set_title("latency CDF per model")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return save_png(fig)


def plot_timeline(
    rows: list[dict[str, str]], max_workers: int = 24, window_s: float | None = None
) -> str:
    """Busy intervals per worker (PPipe Fig. 12 style), first ``window_s`` of the run."""
    plt = pyplot()
    workers = sorted({r["worker"] for r in rows})[:max_workers]
    starts = [float(r["start_s"]) for r in rows]
    t0 = min(starts) if starts else 0.0
    if window_s is None:
        ends = [float(r["end_s"]) for r in rows]
        window_s = min(1.0, (max(ends) - t0) if ends else 1.0)
    models = sorted({r["model"] for r in rows})
    colors = {m: plt.cm.tab10(i % 10) for i, m in enumerate(models)}
    fig, ax = plt.subplots(figsize=(9, 0.28 * len(workers) + 1.4))
    ypos = {w: i for i, w in enumerate(workers)}
    for r in rows:
        w = r["worker"]
        s, e = float(r["start_s"]), float(r["end_s"])
        if w not in ypos or s > t0 + window_s:
            continue
        ax.barh(
            ypos[w],
            (e - s) * 1e3,
            left=(s - t0) * 1e3,
            height=0.7,
            color=colors[r["model"]],
            alpha=0.5 if r["status"] != "completed" else 1.0,
        )
    ax.set_yticks(range(len(workers)))
    ax.set_yticklabels(workers, fontsize=6)
    ax.set_xlabel(f"time (ms) from {t0:.3f} s")
    ax.set_title("per-worker timeline (colour: model; faded: preempted/failed)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[m]) for m in models]
    ax.legend(handles, models, fontsize=7, loc="upper right")
    fig.tight_layout()
    return save_png(fig)


def plot_utilization(summary: dict[str, Any]) -> str:
    plt = pyplot()
    util = summary.get("utilization", {})
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.bar(list(util), [100 * v for v in util.values()], color="tab:blue")
    ax.set_ylabel("utilisation (%)")
    ax.set_ylim(0, 100)
    ax.set_title("busy time / (time x slices), per GPU type")
    fig.tight_layout()
    return save_png(fig)


def _read_csv(path: Path, columns: tuple[str, ...]) -> list[dict[str, str]]:
    from hetserve.core.files import csv_rows

    rows = [row for _, row in csv_rows(path, columns)]
    for i, row in enumerate(rows):
        for c in columns:
            if c.endswith(("_s", "_ms")) and row[c]:
                try:
                    float(row[c])
                except ValueError:
                    raise HetserveError(
                        f"{path}:{i + 2}: field '{c}': expected a number, got {row[c]!r}"
                    ) from None
    return rows


def write_report(folder: str | Path) -> Path:
    """``FOLDER/report.html``; a file in the folder that is not what hetserve wrote is a
    one-line error naming it."""
    folder = Path(folder)
    current = [folder]
    try:
        return _write_report(folder, current)
    except HetserveError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        raise HetserveError(
            f"{current[-1]}: not as hetserve simulate/sweep writes it ({type(e).__name__}: "
            f"{e}); re-run the command that wrote it"
        ) from None


def _write_report(folder: Path, current: list[Path]) -> Path:
    if not folder.is_dir():
        raise HetserveError(f"{folder}: not a folder with simulate or sweep output")
    parts: list[str] = []
    found = False
    sweep = folder / "sweep.json"
    if sweep.exists():
        found = True
        current.append(sweep)
        data = read_json(sweep, "sweep results")
        rows = "".join(
            f"<tr><td>{html.escape(k)}</td><td>{v['max_load_factor']:.3f}</td></tr>"
            for k, v in data.items()
            if isinstance(v, dict) and "curve" in v
        )
        parts.append(
            f"<h2>Load-factor search</h2><table><tr><th>scheduler</th><th>max load "
            f"factor at target</th></tr>{rows}</table>"
            f"<img src='data:image/png;base64,{plot_sweep(data)}'>"
        )
    summ = folder / "summary.json"
    if summ.exists():
        found = True
        current.append(summ)
        s = read_json(summ, "run summary")
        if not isinstance(s, dict):
            raise HetserveError(f"{summ}: expected a JSON object (a run summary)")
        keys = [
            "attainment",
            "goodput_rps",
            "offered_rps",
            "dropped",
            "late",
            "failed",
            "energy_j",
            "energy_per_request_j",
            "mean_batch_size",
        ]
        rows = "".join(f"<tr><td>{k}</td><td>{s.get(k)}</td></tr>" for k in keys)
        lat = s.get("latency_ms", {})
        rows += "".join(f"<tr><td>latency {k} (ms)</td><td>{v}</td></tr>" for k, v in lat.items())
        parts.append(
            f"<h2>Summary</h2><table>{rows}</table>"
            f"<img src='data:image/png;base64,{plot_utilization(s)}'>"
        )
    req = folder / "requests.csv"
    if req.exists():
        found = True
        current.append(req)
        cdf = plot_latency_cdf(_read_csv(req, ("model", "latency_ms")))
        parts.append(f"<h2>Latency</h2><img src='data:image/png;base64,{cdf}'>")
    bat = folder / "batches.csv"
    if bat.exists():
        found = True
        current.append(bat)
        rows = _read_csv(bat, ("worker", "model", "start_s", "end_s", "status"))
        parts.append(f"<h2>Timeline</h2><img src='data:image/png;base64,{plot_timeline(rows)}'>")
    if not found:
        raise HetserveError(
            f"{folder}: no summary.json, requests.csv, batches.csv or sweep.json to report on"
        )
    out = folder / "report.html"
    out.write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>hetserve report"
        "</title><style>body{font-family:sans-serif;max-width:960px;margin:auto}"
        "td,th{padding:2px 10px;text-align:left}</style></head><body>"
        f"<h1>hetserve report: {html.escape(str(folder))}</h1>"
        + "".join(parts)
        + "</body></html>\n"
    )
    return out


def write_results(results: Any, out_dir: str | Path) -> Path:
    """``DIR/results.json`` of a study: NaN and infinities as null, NumPy scalars as
    numbers, and what produced it under ``provenance`` (versions, git commit, command)."""
    from hetserve.core.provenance import provenance

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    doc = {**results, "provenance": provenance()}
    path.write_text(json.dumps(_clean(doc), indent=1, allow_nan=False))
    return path


def _clean(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not np.isfinite(x):
        return None
    return x


def img_tag(b64: str) -> str:
    """An inline PNG for a report page."""
    return f"<img src='data:image/png;base64,{b64}'>"


def html_page(title: str, body: list[str]) -> str:
    """A self-contained report page (tables styled, images inline)."""
    head = (
        f"<html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;max-width:1100px;margin:auto}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;"
        "text-align:right}</style></head><body>"
    )
    return "\n".join([head, *body, "</body></html>"])


def bars(
    ax: Any,
    categories: list[str],
    series: dict[str, list[float]],
    top: float,
    ylabel: str,
    title: str,
    colors: dict[str, str] | None = None,
) -> None:
    """Grouped bars: one group per category, one bar per series, legend on top."""
    width = 0.8 / max(1, len(series))
    for k, (name, ys) in enumerate(series.items()):
        xs = [i + (k - (len(series) - 1) / 2) * width for i in range(len(categories))]
        ax.bar(xs, ys, width, label=name, color=(colors or {}).get(name))
    ax.set_xticks(range(len(categories)), categories)
    ax.set_ylim(0, top)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8, ncol=max(1, len(series)), loc="upper center")
    ax.grid(axis="y", alpha=0.3)


def table_html(head: list[str], rows: list[list[str]]) -> str:
    h = "".join(f"<th>{html.escape(x)}</th>" for x in head)
    b = "".join("<tr>" + "".join(f"<td>{html.escape(x)}</td>" for x in r) + "</tr>" for r in rows)
    return f"<table><tr>{h}</tr>{b}</table>"
