"""Model versions as the server serves them (Triton's version policies, applied by the
model repository before the server starts; the runtime sits below it in the layering, so
what it learns of versions comes in as this plain data).

A zoo model has the one version ``1``. A repository model serves every version its policy
names that loads and has the default version's graph (the same cuts and tensors: the
versions share the plan, each holding its own weights on every worker of the model); a
request naming no version gets the default one, the newest served.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ServedVersions:
    default: int  # what a request naming no version gets (the planned version)
    ready: tuple[int, ...]  # every served version, the default included, ascending
    # every version on disk: (version, "READY" | "UNAVAILABLE", reason)
    states: tuple[tuple[int, str, str], ...] = ()

    @property
    def others(self) -> list[int]:
        return [v for v in self.ready if v != self.default]


ZOO = ServedVersions(1, (1,), ((1, "READY", ""),))


@dataclass
class VersionTable:
    """Per model, its served versions; models that could not load, with the reason."""

    models: dict[str, ServedVersions] = field(default_factory=dict)
    unavailable: dict[str, tuple[int, str]] = field(default_factory=dict)  # name: (v, why)

    @classmethod
    def of_states(
        cls, states: dict[str, list[Any]], unavailable: dict[str, tuple[int, str]]
    ) -> VersionTable:
        """From the model repository's states (``ModelRepository.serving``: per model, its
        versions' states); the default is the newest READY version (the one planned)."""
        models = {}
        for m, vs in states.items():
            ready = tuple(v.version for v in vs if v.state == "READY")
            rows = tuple((v.version, v.state, v.reason) for v in vs)
            models[m] = ServedVersions(max(ready), ready, rows)
        return cls(models, dict(unavailable))

    def of(self, model: str) -> ServedVersions:
        return self.models.get(model, ZOO)

    def others(self) -> dict[str, list[int]]:
        """Per model, the served versions other than the default (workers build them)."""
        return {m: sv.others for m, sv in self.models.items() if sv.others}

    def parse(self, model: str, version: str | None) -> tuple[int | None, str | None]:
        """A request's version (as the route or the body gives it): None for the default,
        else the version; or an error message (the version is not served)."""
        sv = self.of(model)
        if version in (None, ""):
            return None, None
        assert version is not None
        if version.isdigit() and int(version) in sv.ready:
            v = int(version)
            return (None if v == sv.default else v), None
        why = next((r for n, s, r in sv.states if str(n) == version and s != "READY"), "")
        served = ", ".join(map(str, sv.ready))
        if why:
            return None, f"version {version} of model {model!r} is UNAVAILABLE: {why}"
        return None, f"model {model!r} has no version {version!r}; versions: {served}"

    def index(self, models: list[str], ready: Any, not_ready_reason: str) -> list[Any]:
        """Triton's repository index: each model and version with its state (``ready(m)``:
        the model has a live pipeline) and, for an unavailable one, the reason."""
        out: list[dict[str, Any]] = []
        for m in models:
            ok = ready(m)
            for n, state, why in self.of(m).states:
                entry: dict[str, Any] = {"name": m, "version": str(n), "state": state}
                if state == "READY" and not ok:
                    entry["state"] = "UNAVAILABLE"
                    if not_ready_reason:
                        entry["reason"] = not_ready_reason
                elif why:
                    entry["reason"] = why
                out.append(entry)
        for m, (n, why) in sorted(self.unavailable.items()):
            out.append({"name": m, "version": str(n), "state": "UNAVAILABLE", "reason": why})
        return out
