"""Profile sets: measured or estimated per-block latency (and energy) tables.

A profile set is a folder (the contract is ``docs/profiles.md``):

- ``latency.csv``: ``model,gpu,share,batch,block,latency_us`` — one block of ``model`` on
  one ``1/share`` slice of a ``gpu`` at batch size ``batch``; blocks numbered from 0;
- ``blocks.csv``: ``model,block,out_bytes`` — bytes per request leaving ``block``;
- ``energy.csv`` (optional): ``model,gpu,share,batch,block,energy_mj``.

The latency of a block range is the sum of its blocks. :class:`TableModel` serves a
profile set through the common latency-model interface; batch sizes between profiled ones
are interpolated linearly, others are errors.
"""

from __future__ import annotations

import bisect
import csv
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hetserve.core.errors import ConfigError, HetserveError
from hetserve.core.files import csv_rows
from hetserve.core.gpus import DEFAULT_CATALOG, GpuCatalog, GpuType
from hetserve.core.latency import LatencyModel, check_latency_args

LATENCY_COLUMNS = ("model", "gpu", "share", "batch", "block", "latency_us")
BLOCKS_COLUMNS = ("model", "block", "out_bytes")
ENERGY_COLUMNS = ("model", "gpu", "share", "batch", "block", "energy_mj")

Key = tuple[str, str, int, int]  # model, gpu, share, batch


@dataclass
class ProfileSet:
    """Per-block tables. ``latency_us[(model, gpu, share, batch)][block]``."""

    out_bytes: dict[str, list[float]] = field(default_factory=dict)
    latency_us: dict[Key, list[float]] = field(default_factory=dict)
    energy_mj: dict[Key, list[float]] | None = None

    def models(self) -> list[str]:
        return list(self.out_bytes)

    def gpus(self, model: str | None = None) -> list[str]:
        return sorted({k[1] for k in self.latency_us if model is None or k[0] == model})

    def configs(self, model: str, gpu: str) -> list[tuple[int, int]]:
        """(share, batch) pairs profiled for a model on a GPU type."""
        return sorted((k[2], k[3]) for k in self.latency_us if k[0] == model and k[1] == gpu)

    # ---------------------------------------------------------- writing
    def write(self, folder: str | Path) -> Path:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / "blocks.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(BLOCKS_COLUMNS)
            for m, bs in self.out_bytes.items():
                for i, b in enumerate(bs):
                    w.writerow([m, i, _fmt(b)])
        _write_table(folder / "latency.csv", LATENCY_COLUMNS, self.latency_us)
        if self.energy_mj is not None:
            _write_table(folder / "energy.csv", ENERGY_COLUMNS, self.energy_mj)
        return folder

    # ---------------------------------------------------------- reading
    @staticmethod
    def read(folder: str | Path, catalog: GpuCatalog = DEFAULT_CATALOG) -> ProfileSet:
        folder = Path(folder)
        if not folder.is_dir():
            raise ConfigError(
                f"{folder}: profile set must be a folder with latency.csv and blocks.csv"
            )
        out_bytes: dict[str, list[float]] = {}
        seen_blocks: dict[str, dict[int, float]] = {}
        path = folder / "blocks.csv"
        for line, row in csv_rows(path, BLOCKS_COLUMNS):
            model = _name(path, line, row, "model")
            block = _int(path, line, row, "block", 0)
            ob = _num(path, line, row, "out_bytes", allow_zero=True)
            d = seen_blocks.setdefault(model, {})
            if block in d:
                raise ConfigError(f"{path}:{line}: block {block} of {model} is listed twice")
            d[block] = ob
        for model, d in seen_blocks.items():
            n = len(d)
            if sorted(d) != list(range(n)):
                missing = sorted(set(range(max(d) + 1)) - set(d))
                raise ConfigError(
                    f"{path}: model {model}: blocks must be numbered 0..{n - 1} "
                    f"without gaps (missing {missing[:5]})"
                )
            out_bytes[model] = [d[i] for i in range(n)]
        if not out_bytes:
            raise ConfigError(f"{path}: no rows; expected at least one model's blocks")
        ps = ProfileSet(out_bytes=out_bytes)
        ps.latency_us = _read_table(folder / "latency.csv", LATENCY_COLUMNS, out_bytes, catalog)
        if (folder / "energy.csv").exists():
            ps.energy_mj = _read_table(folder / "energy.csv", ENERGY_COLUMNS, out_bytes, catalog)
        return ps


def _fmt(x: float) -> str:
    return format(x, ".10g")


def _write_table(path: Path, columns: Sequence[str], table: dict[Key, list[float]]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(columns)
        for (m, g, s, b), vals in sorted(table.items()):
            for i, v in enumerate(vals):
                w.writerow([m, g, s, b, i, _fmt(v)])


def _name(path: Path, line: int, row: dict[str, str], col: str) -> str:
    v = row[col].strip()
    if not v:
        raise ConfigError(f"{path}:{line}: field '{col}': expected a non-empty name")
    return v


def _int(path: Path, line: int, row: dict[str, str], col: str, minimum: int) -> int:
    try:
        v = int(row[col])
    except ValueError:
        raise ConfigError(
            f"{path}:{line}: field '{col}': expected an integer >= {minimum}, got {row[col]!r}"
        ) from None
    if v < minimum:
        raise ConfigError(
            f"{path}:{line}: field '{col}': expected an integer >= {minimum}, got {v}"
        )
    return v


def _num(path: Path, line: int, row: dict[str, str], col: str, allow_zero: bool = False) -> float:
    what = "a non-negative number" if allow_zero else "a positive number"
    try:
        v = float(row[col])
    except ValueError:
        raise ConfigError(
            f"{path}:{line}: field '{col}': expected {what}, got {row[col]!r}"
        ) from None
    if not (v >= 0 if allow_zero else v > 0) or v != v or v == float("inf"):
        raise ConfigError(f"{path}:{line}: field '{col}': expected {what}, got {row[col]}")
    return v


def _read_table(
    path: Path, columns: Sequence[str], out_bytes: dict[str, list[float]], catalog: GpuCatalog
) -> dict[Key, list[float]]:
    value_col = columns[-1]
    cells: dict[Key, dict[int, float]] = {}
    for line, row in csv_rows(path, columns):
        model = _name(path, line, row, "model")
        if model not in out_bytes:
            raise ConfigError(f"{path}:{line}: model {model!r} has no rows in blocks.csv")
        gname = _name(path, line, row, "gpu")
        try:
            gpu = catalog.get(gname).name
        except HetserveError as e:
            raise ConfigError(f"{path}:{line}: field 'gpu': {e}") from None
        share = _int(path, line, row, "share", 1)
        batch = _int(path, line, row, "batch", 1)
        block = _int(path, line, row, "block", 0)
        n = len(out_bytes[model])
        if block >= n:
            raise ConfigError(
                f"{path}:{line}: block {block} of {model}: blocks.csv has blocks 0..{n - 1}"
            )
        val = _num(path, line, row, value_col)
        d = cells.setdefault((model, gpu, share, batch), {})
        if block in d:
            raise ConfigError(
                f"{path}:{line}: duplicate row for {model} on {gpu} share "
                f"{share} batch {batch} block {block}"
            )
        d[block] = val
    table = {}
    for key, d in cells.items():
        n = len(out_bytes[key[0]])
        if len(d) != n:
            missing = sorted(set(range(n)) - set(d))
            raise ConfigError(
                f"{path}: {key[0]} on {key[1]} share {key[2]} batch {key[3]}: "
                f"missing blocks {missing[:5]} (every block 0..{n - 1} needed)"
            )
        table[key] = [d[i] for i in range(n)]
    if not table:
        raise ConfigError(f"{path}: no rows")
    return table


class TableModel:
    """The latency-model interface over a :class:`ProfileSet`."""

    def __init__(self, profiles: ProfileSet, catalog: GpuCatalog = DEFAULT_CATALOG) -> None:
        self.profiles = profiles
        self.catalog = catalog
        self._batches: dict[tuple[str, str, int], list[int]] = {}
        for m, g, s, b in profiles.latency_us:
            self._batches.setdefault((m, g, s), []).append(b)
        for v in self._batches.values():
            v.sort()

    def _model(self, model: str) -> str:
        if model in self.profiles.out_bytes:
            return model
        from hetserve.core.errors import unknown

        raise unknown("model in profile set", model, self.profiles.out_bytes)

    def num_blocks(self, model: str) -> int:
        return len(self.profiles.out_bytes[self._model(model)])

    def out_bytes(self, model: str, block: int) -> float:
        return self.profiles.out_bytes[self._model(model)][block]

    def batches(self, model: str, gpu: str | GpuType, share: int) -> list[int]:
        g = gpu.name if isinstance(gpu, GpuType) else self.catalog.get(gpu).name
        return list(self._batches.get((model, g, share), []))

    def _lookup(
        self,
        table: dict[Key, list[float]],
        model: str,
        gpu: str | GpuType,
        share: int,
        batch: int,
        blocks: range | None,
    ) -> float:
        model = self._model(model)
        rng = check_latency_args(model, share, batch, self.num_blocks(model), blocks)
        g = gpu.name if isinstance(gpu, GpuType) else self.catalog.get(gpu).name
        bs = self._batches.get((model, g, share))
        if not bs:
            have = sorted({(k[1], k[2]) for k in table if k[0] == model})
            raise HetserveError(
                f"profile set has no rows for {model} on {g} share {share} "
                f"(has: {', '.join(f'{x} share {y}' for x, y in have[:8])})"
            )

        def total(b: int) -> float:
            return sum(table[(model, g, share, b)][i] for i in rng)

        if batch in bs:
            return total(batch)
        i = bisect.bisect_left(bs, batch)
        if i == 0 or i == len(bs):
            raise HetserveError(
                f"profile set: {model} on {g} share {share} is profiled at "
                f"batches {bs[0]}..{bs[-1]}, not {batch}"
            )
        lo, hi = bs[i - 1], bs[i]
        w = (batch - lo) / (hi - lo)
        return (1 - w) * total(lo) + w * total(hi)

    def latency(
        self, model: str, gpu: str | GpuType, share: int, batch: int, blocks: range | None = None
    ) -> float:
        return self._lookup(self.profiles.latency_us, model, gpu, share, batch, blocks) / 1e6

    def energy(
        self, model: str, gpu: str | GpuType, share: int, batch: int, blocks: range | None = None
    ) -> float:
        if self.profiles.energy_mj is None:
            raise HetserveError("profile set has no energy.csv; energy is not available")
        return self._lookup(self.profiles.energy_mj, model, gpu, share, batch, blocks) / 1e3


def estimate_profiles(
    model: LatencyModel,
    models: Sequence[str],
    gpus: Sequence[GpuType],
    shares: Sequence[int] = (1, 2, 3, 4),
    batches: Sequence[int] = tuple(range(1, 9)),
    progress: object | None = None,
) -> ProfileSet:
    """A profile set from any latency model (e.g. the roofline): every block of every model
    on every GPU type, share (only 1 where the GPU lacks MPS) and batch size."""
    ps = ProfileSet(energy_mj={})
    assert ps.energy_mj is not None
    for m in models:
        n = model.num_blocks(m)
        ps.out_bytes[m] = [model.out_bytes(m, i) for i in range(n)]
        for g in gpus:
            for s in shares:
                if s > 1 and not g.mps:
                    continue
                for b in batches:
                    key = (m, g.name, s, b)
                    ps.latency_us[key] = [
                        model.latency(m, g, s, b, range(i, i + 1)) * 1e6 for i in range(n)
                    ]
                    ps.energy_mj[key] = [
                        model.energy(m, g, s, b, range(i, i + 1)) * 1e3 for i in range(n)
                    ]
            if progress is not None:
                progress()  # type: ignore[operator]
    return ps
