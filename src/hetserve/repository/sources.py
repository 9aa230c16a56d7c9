"""Loading a repository version as an exported program: ``model.pt2`` as it is,
``model.py`` + safetensors and Hugging Face folders exported here with the batch dimension
dynamic (``importer`` module docstring); and the request's tensors it takes and returns."""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from hetserve.core.errors import ConfigError, HetserveError
from hetserve.core.tensors import TORCH_TO_DATATYPE, TensorSpec
from hetserve.repository.layout import ModelConfig, RepoModel, Version

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
DEFAULT_SEQ_LEN = 128


class ImportError_(HetserveError):
    """A repository model cannot be imported; the message says why and what to do."""


@dataclass
class Source:
    """What an import starts from: the exported program and the request's tensors."""

    program: Any  # torch.export.ExportedProgram
    inputs: tuple[TensorSpec, ...]
    output_names: tuple[str, ...]
    eager: Any = None  # the nn.Module (model.py and Hugging Face), for checks


class MultiInput:
    """The request's inputs, as the zoo's ``InputSpec`` shows a model's one input: random
    examples (integers within their value range), shapes without the batch dimension."""

    def __init__(self, inputs: tuple[TensorSpec, ...], dtype: torch.dtype) -> None:
        self.inputs = inputs
        self.float_dtype = dtype
        first = inputs[0]
        self.shape = first.shape
        self.name = first.name
        self.dtype = _torch_dtype(first.datatype, dtype)
        self.vocab = first.value_range[1] if first.value_range else 0

    def example(self, batch: int = 1, seed: int = 0) -> Any:
        g = torch.Generator().manual_seed(seed)
        xs = []
        for s in self.inputs:
            dt = _torch_dtype(s.datatype, self.float_dtype)
            if dt.is_floating_point:
                xs.append(torch.randn((batch, *s.shape), generator=g).to(dt))
            elif dt == torch.bool:
                xs.append(torch.ones((batch, *s.shape), dtype=dt))
            else:
                lo, hi = s.value_range or (0, 2)
                if s.name == "attention_mask" or (lo, hi) == (0, 2):
                    xs.append(torch.ones((batch, *s.shape), dtype=dt))
                else:
                    xs.append(torch.randint(lo, hi, (batch, *s.shape), generator=g, dtype=dt))
        return xs[0] if len(xs) == 1 else tuple(xs)


def _torch_dtype(datatype: str, float_dtype: torch.dtype) -> torch.dtype:
    dt = {v: k for k, v in TORCH_TO_DATATYPE.items()}[datatype]
    t = getattr(torch, dt.split(".")[1])
    return float_dtype if t.is_floating_point and float_dtype == torch.bfloat16 else t


# ------------------------------------------------------------------ loading sources


def _load_module_file(path: Path) -> Any:
    name = f"hetserve_repo_{abs(hash(str(path)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except Exception as e:
        raise ImportError_(f"{path}: running it failed: {type(e).__name__}: {e}") from None
    return mod


def _safetensors(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    out: dict[str, torch.Tensor] = {}
    for p in sorted(folder.glob("*.safetensors")):
        try:
            out.update(load_file(str(p)))
        except (SafetensorError, OSError, ValueError) as e:
            raise ImportError_(f"{p}: not a readable safetensors file ({e})") from None
    return out


def _load_weights(module: Any, state: dict[str, torch.Tensor], where: Path) -> None:
    """The module's weights become ``state``'s tensors (``assign``: not copied into the
    module's own; safetensors' tensors map their file, so the weights stay file pages)."""
    try:
        module.load_state_dict(state, strict=True, assign=True)
    except RuntimeError as e:
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        detail = "; ".join(lines[1:3])[:300]
        raise ImportError_(
            f"{where}: the weights do not match the module built by model.py ({detail})"
        ) from None


@contextlib.contextmanager
def _quiet_torch() -> Any:
    """torch's loggers print the exporter's tracebacks as warnings before it raises; the
    user gets the one-line error instead."""
    import io
    import logging

    log = logging.getLogger("torch")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # it also prints the graph
            yield
    finally:
        log.setLevel(level)


def _export(module: Any, kwargs: dict[str, torch.Tensor], where: Path, max_batch: int) -> Any:
    batch = torch.export.Dim("batch", min=1, max=max(2, max_batch))
    dyn = {k: {0: batch} for k in kwargs}
    try:
        with torch.no_grad(), _quiet_torch():
            return torch.export.export(module, (), kwargs, dynamic_shapes=dyn, strict=False)
    except Exception as e:
        msg = " ".join(str(e).split())[:400]
        raise ImportError_(f"{where}: torch.export failed: {type(e).__name__}: {msg}") from None


def _specs_of(
    kwargs: dict[str, torch.Tensor], config: ModelConfig, vocab: dict[str, tuple[int, int]]
) -> tuple[TensorSpec, ...]:
    given = {t.name: t for t in config.inputs or []}
    out = []
    for name, t in kwargs.items():
        dt = TORCH_TO_DATATYPE.get(str(t.dtype))
        if t.dtype == torch.bfloat16:
            dt = "FP32"  # NumPy and the protocol's clients have no bfloat16: cast on arrival
        if dt is None:
            raise ImportError_(f"input {name}: datatype {t.dtype} is not supported")
        c = given.get(name)
        vr = tuple(c.value_range) if c is not None and c.value_range else vocab.get(name)
        out.append(TensorSpec(name, dt, tuple(t.shape[1:]), vr))  # type: ignore[arg-type]
    return tuple(out)


def _outputs(eager_out: Any, config: ModelConfig) -> tuple[str, ...]:
    return _rename(leaf_names(eager_out), config)


def leaf_names(out: Any) -> tuple[str, ...]:
    """A model's outputs as the flat tensors ``torch.export`` returns (its pytree leaves,
    in order), each named by its path: ``output`` for one tensor; a dict's (also a
    ``transformers`` output's) keys, ``hidden_states.3`` for a nested sequence's item;
    ``output_1``, ``output_2.0`` for a tuple's. ``None`` leaves are dropped (the
    program has no output for them); any other leaf is refused."""
    if isinstance(out, torch.Tensor):
        return ("output",)
    names: list[str] = []

    def walk(x: Any, path: list[str]) -> None:
        if x is None:
            return
        if isinstance(x, torch.Tensor):
            names.append(".".join(path))
        elif isinstance(x, Mapping):  # a dict, or transformers' ModelOutput
            for k, v in x.items():
                walk(v, [*path, str(k)])
        elif isinstance(x, (tuple, list)):
            for k, v in enumerate(x):
                walk(v, [*path, f"output_{k}" if not path else str(k)])
        else:
            where = ".".join(path) or "the output"
            raise ImportError_(
                f"{where} is a {type(x).__name__}; a served model returns tensors (in dicts, "
                f"tuples and lists; None is left out)"
            )

    walk(out, [])
    if not names:
        raise ImportError_("the model returns no tensor")
    return tuple(names)


def _spec_names(spec: Any, n_out: int) -> tuple[str, ...]:
    """A ``.pt2``'s output names from its output structure (``leaf_names``); the plain
    ``output_k`` where the structure cannot be rebuilt."""
    from torch.utils import _pytree as pytree

    with contextlib.suppress(Exception):
        leaves = [torch.empty(0) for _ in range(n_out)]
        names = leaf_names(pytree.tree_unflatten(leaves, spec))
        if len(names) == n_out:
            return names
    return ("output",) if n_out == 1 else tuple(f"output_{k}" for k in range(n_out))


def _rename(names: tuple[str, ...], config: ModelConfig) -> tuple[str, ...]:
    if config.outputs is None:
        return names
    if len(config.outputs) != len(names):
        raise ConfigError(
            f"config.yaml: outputs names {len(config.outputs)} tensors; the model returns "
            f"{len(names)} ({', '.join(names)})"
        )
    return tuple(config.outputs)


def _example_kwargs(specs: list[Any], batch: int, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    return dict(
        zip(
            [s.name for s in specs],
            as_tuple(MultiInput(tuple(specs), dtype).example(batch)),
            strict=True,
        )
    )


def as_tuple(x: Any) -> tuple[Any, ...]:
    return x if isinstance(x, tuple) else (x,)


def source_python(model: RepoModel, version: Version) -> Source:
    mod = _load_module_file(version.path / "model.py")
    for fn in ("build", "example_inputs"):
        if not callable(getattr(mod, fn, None)):
            raise ImportError_(
                f"{version.path / 'model.py'}: expected a function {fn}() (docs/repository.md)"
            )
    dtype = DTYPES[model.config.datatype]
    try:
        net = mod.build()
    except Exception as e:
        raise ImportError_(
            f"{version.path / 'model.py'}: build() failed: {type(e).__name__}: {e}"
        ) from None
    if not isinstance(net, torch.nn.Module):
        raise ImportError_(f"{version.path / 'model.py'}: build() must return a torch.nn.Module")
    _load_weights(net, _safetensors(version.path), version.path)
    net = net.eval().to(dtype)
    ex = mod.example_inputs(2)
    if isinstance(ex, torch.Tensor):
        ex = {"input": ex}
    if not isinstance(ex, dict) or not all(isinstance(v, torch.Tensor) for v in ex.values()):
        raise ImportError_(
            f"{version.path / 'model.py'}: example_inputs(batch) must return a dict of "
            f"tensors with the batch as their first dimension"
        )
    ex = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in ex.items()}
    ex = _fixed_shapes(ex, model.config, version.path)
    with torch.no_grad():
        out = net(**ex)
    specs = _specs_of(ex, model.config, {})
    ep = _export(net, ex, version.path / "model.py", model.config.max_batch_size)
    return Source(ep, specs, _outputs(out, model.config), net)


def _fixed_shapes(
    ex: dict[str, torch.Tensor], config: ModelConfig, where: Path
) -> dict[str, torch.Tensor]:
    """Inputs reshaped to config.yaml's shapes where it gives them."""
    for t in config.inputs or []:
        if t.name not in ex:
            raise ConfigError(
                f"{where.parent / 'config.yaml'}: inputs names {t.name!r}, which the model "
                f"does not take (it takes {', '.join(ex)})"
            )
        if t.shape is not None and list(ex[t.name].shape[1:]) != t.shape:
            v = ex[t.name]
            if v.is_floating_point():
                ex[t.name] = torch.randn((v.shape[0], *t.shape)).to(v.dtype)
            else:
                ex[t.name] = torch.zeros((v.shape[0], *t.shape), dtype=v.dtype)
    return ex


def source_huggingface(model: RepoModel, version: Version) -> Source:
    try:
        import transformers
    except ImportError:
        raise ImportError_(
            f"{version.path}: a Hugging Face folder needs transformers, which the Python "
            f"running hetserve lacks: {sys.executable} -m pip install 'transformers>=4.56' "
            "safetensors (in a clone: .venv/bin/pip install -c constraints.txt -e "
            "'.[transformers]')"
        ) from None
    transformers.logging.set_verbosity_error()  # its progress bars and config warnings
    transformers.utils.logging.disable_progress_bar()
    try:
        cfg = transformers.AutoConfig.from_pretrained(str(version.path), local_files_only=True)
    except Exception as e:
        raise ImportError_(f"{version.path / 'config.json'}: {type(e).__name__}: {e}") from None
    archs = getattr(cfg, "architectures", None) or []
    cls = getattr(transformers, archs[0], None) if archs else None
    if cls is None:
        raise ImportError_(
            f"{version.path / 'config.json'}: 'architectures' must name a transformers model "
            f"class (got {archs or 'none'})"
        )
    dtype = DTYPES[model.config.datatype]
    try:
        net = cls.from_pretrained(
            str(version.path), local_files_only=True, use_safetensors=True, dtype=dtype
        )
    except Exception as e:
        msg = " ".join(str(e).split())[:300]
        raise ImportError_(f"{version.path}: loading {archs[0]} failed: {msg}") from None
    net = net.eval()
    if hasattr(net.config, "use_cache"):
        net.config.use_cache = False
    main = getattr(net, "main_input_name", "input_ids")
    params = inspect.signature(net.forward).parameters
    vocab: dict[str, tuple[int, int]] = {}
    if main == "input_ids":
        seq = min(DEFAULT_SEQ_LEN, getattr(cfg, "max_position_embeddings", None) or DEFAULT_SEQ_LEN)
        names = ["input_ids", *(["attention_mask"] if "attention_mask" in params else [])]
        given = {t.name: t for t in model.config.inputs or []}
        if "input_ids" in given and given["input_ids"].shape:
            seq = given["input_ids"].shape[0]
        vocab = {"input_ids": (0, int(cfg.vocab_size)), "attention_mask": (0, 2)}
        specs = [TensorSpec(n, "INT64", (seq,), vocab[n]) for n in names]
    elif main == "pixel_values":
        size = getattr(cfg, "image_size", 224)
        size = size if isinstance(size, int) else int(size[0])
        ch = getattr(cfg, "num_channels", 3)
        specs = [TensorSpec("pixel_values", "FP32", (ch, size, size))]
    else:
        raise ImportError_(
            f"{version.path}: {archs[0]} takes {main!r}; hetserve imports token models "
            f"(input_ids) and image models (pixel_values); export it yourself as model.pt2"
        )
    ex = _example_kwargs(specs, 2, dtype)
    ex = _fixed_shapes(ex, model.config, version.path)
    with torch.no_grad():
        out = net(**ex)
    ep = _export(net, ex, version.path, model.config.max_batch_size)
    return Source(ep, _specs_of(ex, model.config, vocab), _outputs(out, model.config), net)


def _transformers_types(path: Path) -> bool:
    """Import the ``transformers`` modules whose types a program's output structure names
    (its output classes are registered with torch's pytree on import, and the program
    cannot be read back without them). Only installed ``transformers`` modules are
    imported, never a module the file names elsewhere. True if any was imported."""
    import importlib
    import re
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            found = set()
            for n in z.namelist():
                if n.endswith(".json"):
                    found |= set(re.findall(rb"transformers(?:\.\w+)+", z.read(n)))
    except (OSError, zipfile.BadZipFile):
        return False
    done = False
    for name in sorted(found):
        module = name.decode().rsplit(".", 1)[0]
        try:
            importlib.import_module(module)
            done = True
        except Exception:  # (not a module, or transformers absent: the load will say)
            continue
    return done


def source_pt2(model: RepoModel, version: Version) -> Source:
    path = version.path / "model.pt2"
    try:
        with _quiet_torch():
            try:
                ep = torch.export.load(str(path))
            except Exception:
                if not _transformers_types(path):
                    raise
                ep = torch.export.load(str(path))  # its output types now registered
    except Exception as e:
        msg = " ".join(str(e).split())[:300]
        raise ImportError_(
            f"{path}: not a torch.export program (save one with torch.export.save): {msg}"
        ) from None
    given = {t.name: t for t in model.config.inputs or []}
    by_name = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    user = list(ep.graph_signature.user_inputs)
    specs: list[TensorSpec] = []
    for name in user:
        val = by_name[name].meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise ImportError_(f"{path}: input {name} is not a tensor")
        if val.ndim == 0 or not isinstance(val.shape[0], torch.SymInt):
            raise ImportError_(
                f"{path}: input {name} has a fixed batch dimension ({tuple(val.shape)}); "
                f"export with dynamic_shapes={{'{name}': {{0: torch.export.Dim('batch')}}}} "
                f"(hetserve batches requests, so it refuses a fixed batch)"
            )
        shape = []
        told = given[name].shape if name in given else None
        if told is not None and len(told) != val.ndim - 1:
            raise ConfigError(
                f"{version.path.parent / 'config.yaml'}: inputs {name}: shape {told} has "
                f"{len(told)} dimensions; the program's input has {val.ndim - 1} besides the batch"
            )
        for k, d in enumerate(val.shape[1:]):
            if isinstance(d, torch.SymInt):
                if told is None:
                    raise ImportError_(
                        f"{path}: input {name} has a dynamic non-batch dimension ({k + 1}); "
                        f"give the size to serve in config.yaml (inputs: [{{name: {name}, "
                        f"shape: [...]}}]) or export it fixed"
                    )
                shape.append(int(told[k]))
            else:
                if told is not None and int(told[k]) != int(d):
                    raise ConfigError(
                        f"{version.path.parent / 'config.yaml'}: inputs {name}: shape {told}, "
                        f"but the program fixes dimension {k + 1} at {int(d)}"
                    )
                shape.append(int(d))
        dt = "FP32" if val.dtype == torch.bfloat16 else TORCH_TO_DATATYPE.get(str(val.dtype))
        if dt is None:
            raise ImportError_(f"{path}: input {name}: datatype {val.dtype} is not supported")
        vr = given[name].value_range if name in given else None
        specs.append(TensorSpec(name, dt, tuple(shape), (vr[0], vr[1]) if vr else None))
    n_out = len(ep.graph_signature.user_outputs)
    names_out = _spec_names(ep.call_spec.out_spec, n_out)
    return Source(ep, tuple(specs), _rename(names_out, model.config), None)


SOURCES = {"pt2": source_pt2, "python": source_python, "huggingface": source_huggingface}
