"""A model repository's models (Triton's layout, ``repository.layout``): the
``core.models.ModelSource`` that a ``ModelCatalog`` holds beside the zoo. Reading the
folders needs no torch; a model's graph, layer table and runnable module come from its
import (``repository.importer``, which needs torch), cached by the files' hash.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hetserve.core.errors import ConfigError, HetserveError, unknown
from hetserve.repository.layout import (
    NAME_PATTERN,
    ModelConfig,
    RepoModel,
    Version,
    VersionState,
    detect_format,
    read_config,
)


class ModelRepository:
    """The models of ``root`` (read once; a model's import is done on first use)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise ConfigError(f"{root}: model repository not found (expected a directory)")
        self.models: dict[str, RepoModel] = {}
        self._graphs: dict[str, Any] = {}
        for d in sorted(self.root.iterdir()):
            if not d.is_dir() or d.name.startswith("."):
                continue
            if not NAME_PATTERN.match(d.name):
                raise ConfigError(
                    f"{d}: a model's folder name must be letters, digits, '.', '_' or '-'"
                )
            m = RepoModel(d.name, d, read_config(d / "config.yaml"))
            for v in sorted(d.iterdir()):
                if v.is_dir() and v.name.isdigit() and int(v.name) > 0:
                    fmt, err = detect_format(v)
                    m.versions[int(v.name)] = Version(int(v.name), v, fmt, err)
            if not m.versions:
                raise ConfigError(
                    f"{d}: no version folders; expected {d}/1/ holding the model "
                    f"(Triton's layout: <repo>/<model>/<version>/)"
                )
            self.models[m.name.lower()] = m
        from hetserve.core.graph import shipped_models

        clash = sorted(set(self.models) & {n.lower() for n in shipped_models()})
        if clash:
            raise ConfigError(
                f"{self.root}: model {clash[0]!r} is also a zoo model; rename its folder"
            )

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        """A repository pickles as its root (a worker in another process reads it again)."""
        return (ModelRepository, (str(self.root),))

    def names(self) -> list[str]:
        return [m.name for m in self.models.values()]

    def get(self, name: str) -> RepoModel:
        m = self.models.get(name.lower())
        if m is None:
            raise unknown("repository model", name, self.names())
        return m

    def __contains__(self, name: str) -> bool:
        return name.lower() in self.models

    def version(self, name: str, version: int | None = None) -> Version:
        m = self.get(name)
        if version is None:
            v = m.default_version()
        elif version not in m.versions:
            raise HetserveError(
                f"model {m.name}: no version {version} (versions: {sorted(m.versions)})"
            )
        else:
            v = m.versions[version]
        if v.error:
            raise ConfigError(v.error)
        return v

    def graph(self, name: str) -> Any:
        """The model's graph (``core.graph.ModelGraph``) from its newest served version:
        from the import cache, else imported now (needs torch)."""
        m = self.get(name)
        if m.name not in self._graphs:
            v = self.version(m.name)
            try:
                from hetserve.repository import importer
            except ImportError as e:
                raise HetserveError(
                    f"model {m.name}: importing a repository model needs torch "
                    f"(pip install 'hetserve[torch]'): {e}"
                ) from None
            self._graphs[m.name] = importer.cached_graph(m, v)
        return self._graphs[m.name]

    def layer_table(self, name: str) -> Any:
        """The layer table (``core.layertable``, one row per leaf-module call) of the
        model's default version: from the import cache, else made now (needs torch)."""
        from hetserve.repository import importer

        m = self.get(name)
        return importer.cached_layer_table(m, self.version(m.name))

    def version_states(self, name: str) -> list[VersionState]:
        """Every version on disk with its state: READY for the default version (the newest
        the policy serves) and for each other served version that imports to the same
        graph (the same cuts and tensors: versions served together share the plan);
        UNAVAILABLE, with the reason, for the rest. Imports each served version (cached).
        Raises when the default version cannot load (the model is broken)."""
        m = self.get(name)
        default = self.graph(m.name)
        d = int(default.meta["version"])
        served = set(m.served())
        from hetserve.repository import importer

        out = []
        for n, v in sorted(m.versions.items()):
            why = ""
            if n not in served:
                why = f"not served by the version policy ({_policy_text(m.config)})"
            elif v.error:
                why = v.error
            elif n != d:
                try:
                    g = importer.cached_graph(m, v)
                except HetserveError as e:
                    why = str(e)
                else:
                    why = _differs(g, default, d)
            out.append(VersionState(n, "UNAVAILABLE" if why else "READY", why))
        return out

    def serving(
        self, names: list[str]
    ) -> tuple[dict[str, list[VersionState]], dict[str, tuple[int, str]]]:
        """For ``serve``: each of ``names`` that is a repository model with its versions'
        states (:meth:`version_states`), and, apart, each that cannot load: its default
        version and the reason."""
        ok: dict[str, list[VersionState]] = {}
        broken: dict[str, tuple[int, str]] = {}
        for name in names:
            if name not in self:
                continue
            m = self.get(name)
            try:
                ok[name] = self.version_states(name)
            except HetserveError as e:
                served = m.served()
                broken[name] = (served[-1] if served else max(m.versions), str(e))
        return ok, broken

    def build(self, name: str, version: int | None = None) -> Any:
        """The model (a ``zoo.layered.LayeredModel``) with the version's weights, cut as
        its graph is (needs torch)."""
        from hetserve.repository import importer

        m = self.get(name)
        v = self.version(m.name, version)
        graph = importer.cached_graph(m, v)
        return importer.build(m, v, list(graph.meta.get("cuts", []))).model


def _policy_text(cfg: ModelConfig) -> str:
    pol = cfg.version_policy
    if pol == "all":
        return "all"
    ((k, x),) = pol.items()
    return f"{k}: {x}"


def _differs(g: Any, default: Any, d: int) -> str:
    """Why version graph ``g`` cannot be served beside the default version ``d``'s."""
    what = ""
    if g.inputs != default.inputs:
        what = "its input tensors"
    elif g.outputs != default.outputs:
        what = "its output tensors"
    elif len(g.layers) != len(default.layers) or g.meta.get("cuts") != default.meta.get("cuts"):
        what = "its cut points (a different architecture)"
    elif [x.flops for x in g.layers] != [x.flops for x in default.layers]:
        what = "its layers' FLOPs (a different architecture)"
    if not what:
        return ""
    return (
        f"{what} differ from version {d}'s; versions served together share one plan, so "
        f"they must have the same architecture (serve it as a model folder of its own)"
    )
