"""A model repository in Triton's layout, read without torch.

::

    REPO/
      <model>/
        config.yaml          optional: what cannot be derived from the model
        <version>/           a positive integer
          model.pt2          a torch.export program (torch.export.save), batch dimension dynamic
        | model.py + *.safetensors    trusted Python building the nn.Module; its weights
        | config.json + *.safetensors a Hugging Face model folder (the ``transformers`` extra)

Pickled weights (``.pt``, ``.pth``, ``.bin``, ``.ckpt``, ``.pkl``) are refused: loading a
pickle runs whatever code it names. ``model.py`` is the one place a repository runs its
own code, by design (docs/repository.md, "Trust").

``config.yaml`` (every key optional; an unknown key is an error)::

    max_batch_size: 32        # rows per batch the model is exported and served for
    slo_ms: 100               # the model's latency SLO (default: as for zoo models)
    datatype: fp32            # fp32 | fp16 | bf16: the weights' and floating inputs' type
    inputs:                   # names, datatypes and fixed shapes (no batch dimension)
      - {name: input_ids, datatype: INT64, shape: [128], value_range: [0, 30522]}
    outputs: [logits]         # output names, in the model's order
    version_policy: {latest: 1}   # or: all, or {specific: [1, 3]} (Triton's policies)
    blocks: 10                # blocks to pre-partition the model into for planning
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from hetserve.core.errors import ConfigError, HetserveError, unknown
from hetserve.core.files import read_yaml
from hetserve.core.tensors import DATATYPES

ENV = "HETSERVE_MODEL_REPOSITORY"
PICKLES = (".pt", ".pth", ".bin", ".ckpt", ".pkl", ".pickle")
FORMATS = ("pt2", "python", "huggingface")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class TensorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    datatype: str | None = None
    shape: list[int] | None = None
    value_range: list[int] | None = None  # integer inputs: [low, high)

    @field_validator("datatype")
    @classmethod
    def _dt(cls, v: str | None) -> str | None:
        if v is not None and v not in DATATYPES:
            raise ValueError(f"expected one of {', '.join(DATATYPES)}")
        return v

    @field_validator("shape")
    @classmethod
    def _shape(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and not all(isinstance(s, int) and s > 0 for s in v):
            raise ValueError("expected positive integers (no batch dimension)")
        return v


class ModelConfig(BaseModel):
    """``REPO/<model>/config.yaml`` (module docstring)."""

    model_config = ConfigDict(extra="forbid")
    max_batch_size: int = Field(32, ge=1, le=4096)
    slo_ms: float | None = Field(None, gt=0, le=3_600_000)
    datatype: Literal["fp32", "fp16", "bf16"] = "fp32"
    inputs: list[TensorConfig] | None = None
    outputs: list[str] | None = None
    version_policy: Any = Field(default_factory=lambda: {"latest": 1})
    blocks: int | None = Field(None, ge=1, le=1000)

    @field_validator("version_policy")
    @classmethod
    def _policy(cls, v: Any) -> Any:
        if v == "all" or v == {"all": {}} or v == {"all": None}:
            return "all"
        if isinstance(v, dict) and len(v) == 1:
            ((k, x),) = v.items()
            if k == "latest" and isinstance(x, int) and x >= 1:
                return {"latest": x}
            if (
                k == "specific"
                and isinstance(x, list)
                and x
                and all(isinstance(i, int) and i >= 1 for i in x)
            ):
                return {"specific": sorted(set(x))}
        raise ValueError("expected all, {latest: N} (N >= 1) or {specific: [versions]}")


@dataclass(frozen=True)
class Version:
    number: int
    path: Path
    format: str  # one of FORMATS
    error: str | None = None  # why it cannot load (found while scanning)

    def files(self) -> list[Path]:
        return sorted(p for p in self.path.rglob("*") if p.is_file())

    def digest(self, config: ModelConfig) -> str:
        """A hash of the version's files and the model's configuration."""
        h = hashlib.sha256(config.model_dump_json().encode())
        for p in self.files():
            h.update(str(p.relative_to(self.path)).encode())
            with p.open("rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
        return h.hexdigest()[:20]


@dataclass(frozen=True)
class VersionState:
    """A version's state as the repository index shows it (Triton's states)."""

    version: int
    state: Literal["READY", "UNAVAILABLE"]
    reason: str = ""


@dataclass
class RepoModel:
    name: str
    path: Path
    config: ModelConfig
    versions: dict[int, Version] = field(default_factory=dict)

    def served(self) -> list[int]:
        """The versions the version policy serves (newest last)."""
        nums = sorted(self.versions)
        pol = self.config.version_policy
        if pol == "all":
            return nums
        if "latest" in pol:
            return nums[-pol["latest"] :]
        return [v for v in nums if v in pol["specific"]]

    def default_version(self) -> Version:
        """The newest served version: the one planning and simulation use."""
        served = self.served()
        if not served:
            pol = self.config.version_policy
            raise ConfigError(
                f"{self.path}: no version to serve (versions on disk: "
                f"{sorted(self.versions) or 'none'}; version_policy: {pol})"
            )
        return self.versions[served[-1]]


def detect_format(path: Path) -> tuple[str, str | None]:
    """The version folder's format, and why it cannot load (None when it can)."""
    names = {p.name for p in path.iterdir()} if path.is_dir() else set()
    pickles = sorted(n for n in names if n.endswith(PICKLES))
    tensors = sorted(n for n in names if n.endswith(".safetensors"))
    if "model.pt2" in names:
        return "pt2", None
    if pickles:
        return "", (
            f"{path / pickles[0]}: pickled weights are refused (loading a pickle runs the "
            f"code it names); save them with safetensors (safetensors.torch.save_file) or "
            f"export the model with torch.export.save as model.pt2"
        )
    if "model.py" in names:
        if not tensors:
            return "python", f"{path}: model.py needs its weights as *.safetensors beside it"
        return "python", None
    if "config.json" in names:
        if not tensors:
            return "huggingface", (
                f"{path}: a Hugging Face folder needs its weights as *.safetensors "
                f"(save_pretrained(..., safe_serialization=True))"
            )
        return "huggingface", None
    return "", (
        f"{path}: expected model.pt2, model.py with *.safetensors, or a Hugging Face folder "
        f"(config.json with *.safetensors); found {', '.join(sorted(names)) or 'nothing'}"
    )


def read_config(path: Path) -> ModelConfig:
    if not path.exists():
        return ModelConfig()
    data = read_yaml(path, "model configuration")
    if data is None:
        return ModelConfig()
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of configuration keys")
    try:
        return ModelConfig.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        if err["type"] == "extra_forbidden":
            keys = ", ".join(ModelConfig.model_fields)
            raise ConfigError(f"{path}: unknown key {where!r}; expected one of: {keys}") from None
        raise ConfigError(f"{path}: {where}: {err['msg']}") from None


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
            if not _NAME.match(d.name):
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


# ------------------------------------------------------------------ the active repository


def use(root: str | Path | None) -> ModelRepository | None:
    """Make ``root`` the repository whose models every command names (None: none)."""
    from hetserve.core.graph import use_models

    repo = ModelRepository(root) if root else None
    use_models(repo)
    return repo


def active() -> ModelRepository | None:
    """The repository in use: the one given to :func:`use`, else
    ``$HETSERVE_MODEL_REPOSITORY`` (then made the one in use)."""
    from hetserve.core.graph import extra_models

    repo = extra_models()
    if isinstance(repo, ModelRepository):
        return repo
    env = os.environ.get(ENV)
    return use(env) if env else None
