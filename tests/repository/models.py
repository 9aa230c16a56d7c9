"""Models nobody here wrote (``transformers`` BERT, GPT-2 and ViT, random weights from
their configs) and a CNN written here with skip connections and a two-output head, saved
as a model repository in Triton's layout in every format hetserve reads."""

from __future__ import annotations

import contextlib
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

SKIPNET = '''
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.a = nn.Conv2d(c, c, 3, padding=1)
        self.bn = nn.BatchNorm2d(c)
        self.b = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return torch.relu(x + self.b(torch.relu(self.bn(self.a(x)))))


class SkipNet(nn.Module):
    """A stem, six residual blocks and two heads (class logits, a box)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.blocks = nn.Sequential(*[Block(16) for _ in range(6)])
        self.cls = nn.Linear(16, 10)
        self.box = nn.Linear(16, 4)

    def forward(self, image):
        h = self.blocks(self.stem(image)).mean((2, 3))
        return {"logits": self.cls(h), "boxes": torch.sigmoid(self.box(h))}
'''

MODEL_PY = (
    SKIPNET
    + """

def build():
    return SkipNet()


def example_inputs(batch):
    return {"image": torch.randn(batch, 3, 32, 32)}
"""
)


def skipnet() -> nn.Module:
    ns: dict[str, object] = {}
    exec(SKIPNET, ns)  # the same source the repository's model.py holds
    return ns["SkipNet"]()  # type: ignore[operator,no-any-return]


def hf_models() -> dict[str, nn.Module]:
    from transformers import (
        BertConfig,
        BertForSequenceClassification,
        GPT2Config,
        GPT2LMHeadModel,
        ViTConfig,
        ViTForImageClassification,
    )  # fmt: skip

    torch.manual_seed(0)
    return {
        "tiny-bert": BertForSequenceClassification(BertConfig(
            vocab_size=1000, hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
            intermediate_size=256, num_labels=3, max_position_embeddings=64)),
        "tiny-gpt2": GPT2LMHeadModel(GPT2Config(
            vocab_size=1000, n_embd=64, n_layer=4, n_head=4, n_positions=64,
            bos_token_id=0, eos_token_id=0)),
        "tiny-vit": ViTForImageClassification(ViTConfig(
            hidden_size=64, num_hidden_layers=4, num_attention_heads=4, intermediate_size=256,
            image_size=32, patch_size=8, num_labels=5)),
    }  # fmt: skip


CONFIGS = {
    "tiny-bert": "max_batch_size: 16\nslo_ms: 500\ninputs:\n"
    "  - {name: input_ids, shape: [32]}\n  - {name: attention_mask, shape: [32]}\n",
    "tiny-gpt2": "max_batch_size: 8\nslo_ms: 500\ninputs:\n  - {name: input_ids, shape: [16]}\n",
    "tiny-vit": "max_batch_size: 16\nslo_ms: 500\n",
    "skipnet": "max_batch_size: 16\nslo_ms: 500\n",
    "skipnet-pt2": "max_batch_size: 16\nslo_ms: 500\noutputs: [logits, boxes]\n",
    "vit-pt2": "max_batch_size: 16\nslo_ms: 500\n",
}


def write_repository(root: Path) -> dict[str, nn.Module]:
    """The repository under ``root``; returns the eager models by repository name."""
    from safetensors.torch import save_file

    eager: dict[str, nn.Module] = {}
    for name, m in hf_models().items():
        m.eval().save_pretrained(root / name / "1", safe_serialization=True)
        eager[name] = m
    torch.manual_seed(1)
    net = skipnet().eval()
    d = root / "skipnet" / "1"
    d.mkdir(parents=True)
    (d / "model.py").write_text(textwrap.dedent(MODEL_PY))
    save_file(net.state_dict(), str(d / "weights.safetensors"))
    eager["skipnet"] = net
    batch = torch.export.Dim("batch", min=1, max=64)
    ep = torch.export.export(net, (torch.randn(2, 3, 32, 32),), dynamic_shapes=({0: batch},))
    (root / "skipnet-pt2" / "1").mkdir(parents=True)
    torch.export.save(ep, str(root / "skipnet-pt2" / "1" / "model.pt2"))
    eager["skipnet-pt2"] = net
    vit = eager["tiny-vit"]
    ep = torch.export.export(
        vit, (), {"pixel_values": torch.randn(2, 3, 32, 32)},
        dynamic_shapes={"pixel_values": {0: batch}}, strict=False,
    )  # fmt: skip
    (root / "vit-pt2" / "1").mkdir(parents=True)
    torch.export.save(ep, str(root / "vit-pt2" / "1" / "model.pt2"))
    eager["vit-pt2"] = vit
    for name, text in CONFIGS.items():
        (root / name / "config.yaml").write_text(text)
    return eager


def eager_outputs(name: str, model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> tuple:
    """The eager model's outputs in the repository model's output order."""
    with torch.no_grad():
        if name in ("skipnet", "skipnet-pt2"):
            out = model(inputs[0])
            return (out["logits"], out["boxes"])
        if name == "tiny-bert":
            return (model(input_ids=inputs[0], attention_mask=inputs[1]).logits,)
        if name == "tiny-gpt2":
            return (model(input_ids=inputs[0], attention_mask=inputs[1], use_cache=False).logits,)
        return (model(pixel_values=inputs[0]).logits,)


@contextlib.contextmanager
def repository_in_use(root: Path, cache: Path) -> Iterator[Any]:
    """``cache`` as HETSERVE_CACHE while open; yields the catalog of ``root``'s models
    (``core.models.ModelCatalog``), which tests pass where a command passes its own."""
    import pytest

    from hetserve.core.models import ModelCatalog
    from hetserve.repository.models import ModelRepository

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HETSERVE_CACHE", str(cache))
        yield ModelCatalog(ModelRepository(root))
