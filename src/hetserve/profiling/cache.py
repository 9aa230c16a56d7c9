"""This machine's measured profiles, cached: ``hetserve serve`` (and the demo) measure the
zoo models once per machine, device, models, batch sizes, blocks and CPU thread count, and
reuse the result.

A cache entry is a profile-set folder (``latency.csv``, ``blocks.csv``, ...) under
``$HETSERVE_CACHE/profiles/<key>/`` (default ``~/.cache/hetserve``) with ``meta.json``
beside it: when it was measured (``measured_at``, UTC ISO 8601), with how many torch
threads (``threads``), on which host and device, for which models, batches and blocks.
``remeasure=True`` measures again and replaces the entry. A cached profile can be stale
(another load on the machine, a changed thread count, a new library): the server compares
the first real batches with it (``runtime.metrics.ProfileWatch``) and warns.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import platform
from collections.abc import Callable
from pathlib import Path

from hetserve.core.models import ZOO, ModelCatalog


def cache_root() -> Path:
    """``$HETSERVE_CACHE`` (default ``~/.cache/hetserve``): profiles/, imports/."""
    return Path(os.environ.get("HETSERVE_CACHE") or Path.home() / ".cache" / "hetserve")


def cache_dir() -> Path:
    return cache_root() / "profiles"


def default_cpu_threads() -> int:
    """Threads for CPU workers: every core but one, which the HTTP front end keeps."""
    return max(1, (os.cpu_count() or 1) - 1)


def _threads(n: int) -> str:
    return f"{n} torch thread{'' if n == 1 else 's'}"


def cache_entry(
    models: list[str],
    device: str,
    batches: list[int],
    n_blocks: int,
    threads: int,
    model_catalog: ModelCatalog = ZOO,
) -> Path:
    """The folder of the cache entry for these settings (it may not exist yet)."""
    # a repository model's files may change under its name: its import's digest is part
    # of the key (zoo models have none)
    digests = [str(model_catalog.graph(m).meta.get("digest", "")) for m in sorted(models)]
    key = "|".join(
        [platform.node(), platform.processor(), str(os.cpu_count()), device,
         ",".join(sorted(models)), ",".join(map(str, batches)), str(n_blocks),
         f"threads={threads}", *(d for d in digests if d)]
    )  # fmt: skip
    return cache_dir() / hashlib.sha256(key.encode()).hexdigest()[:16]


def read_meta(folder: Path) -> dict[str, object]:
    """A cache entry's ``meta.json`` (empty for entries written before it existed)."""
    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def measured_profiles(
    models: list[str],
    device: str,
    batches: list[int],
    n_blocks: int,
    threads: int = 0,
    remeasure: bool = False,
    say: Callable[[str], None] = print,
    model_catalog: ModelCatalog = ZOO,
) -> Path:
    """A profile set of this machine for the models (of ``model_catalog``): measured once,
    then reused unless ``remeasure``; ``say`` reports which (with the entry's date and
    thread count)."""
    from hetserve.profiling.measure import measure_profiles

    threads = threads or default_cpu_threads()
    folder = cache_entry(models, device, batches, n_blocks, threads, model_catalog)
    if (folder / "latency.csv").exists() and not remeasure:
        meta = read_meta(folder)
        when = meta.get("measured_at", "at an unknown time")
        say(
            f"reusing this machine's profiles measured {when} with {_threads(threads)} "
            f"in {folder} (--remeasure to measure again)"
        )
        return folder
    say(
        f"measuring {', '.join(models)} on {device} with {_threads(threads)} (kept in "
        f"{folder} for next time)"
    )
    ps, _ = measure_profiles(
        models,
        device,
        batches,
        (1,),
        n_blocks,
        warmup=2,
        repeats=5,
        threads=threads,
        model_catalog=model_catalog,
    )  # with the threads the workers will run with
    ps.write(folder)
    meta = {
        "measured_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "threads": threads,
        "host": platform.node(),
        "device": device,
        "models": sorted(models),
        "batches": list(batches),
        "n_blocks": n_blocks,
    }
    (folder / "meta.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    say(f"measured profiles written to {folder}")
    return folder
