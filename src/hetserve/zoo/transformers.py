"""Transformer models: ViT-B/16 (Dosovitskiy et al. 2021), BERT-base (Devlin et al.
2019), GPT-2 small (Radford et al. 2019). Attention is written with explicit matmuls so
that the FLOP counter sees every product. Weights are random.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from hetserve.zoo.layered import InputSpec, LayeredModel


class SelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int, causal: bool = False) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.causal = causal

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        if self.causal:
            mask = torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(mask, float("-inf"))
        y = scores.softmax(-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, n, d))


class MLP(nn.Module):
    def __init__(self, dim: int, hidden: int, approximate: str = "none") -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.approximate = approximate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x), approximate=self.approximate))


class PreNormBlock(nn.Module):
    """ViT / GPT-2 block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(
        self, dim: int, heads: int, eps: float, causal: bool = False, approximate: str = "none"
    ) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim, eps=eps)
        self.attn = SelfAttention(dim, heads, causal)
        self.ln2 = nn.LayerNorm(dim, eps=eps)
        self.mlp = MLP(dim, 4 * dim, approximate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class PostNormBlock(nn.Module):
    """BERT block: ln(x + attn(x)), then ln(x + mlp(x))."""

    def __init__(self, dim: int, heads: int, eps: float = 1e-12) -> None:
        super().__init__()
        self.attn = SelfAttention(dim, heads)
        self.ln1 = nn.LayerNorm(dim, eps=eps)
        self.mlp = MLP(dim, 4 * dim)
        self.ln2 = nn.LayerNorm(dim, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.ln1(x + self.attn(x))
        return self.ln2(x + self.mlp(x))


class PatchEmbed(nn.Module):
    def __init__(self, size: int = 224, patch: int = 16, dim: int = 768) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, dim, patch, patch)
        n = (size // patch) ** 2
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x).flatten(2).transpose(1, 2)
        return torch.cat([self.cls.expand(y.shape[0], -1, -1), y], 1) + self.pos


class ViTHead(nn.Module):
    def __init__(self, dim: int = 768, classes: int = 1000) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.fc = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.norm(x)[:, 0])


def vit_b16() -> LayeredModel:
    layers = [("embed", "embedding", PatchEmbed())]
    layers += [(f"encoder{i}", "encoder", PreNormBlock(768, 12, 1e-6)) for i in range(12)]
    layers.append(("head", "head", ViTHead()))
    return LayeredModel("vit-b16", layers, InputSpec((3, 224, 224)), "vit", "classification")


class TokenEmbed(nn.Module):
    def __init__(
        self, vocab: int, positions: int, dim: int, types: int = 0, norm_eps: float | None = None
    ) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(positions, dim)
        self.typ = nn.Embedding(types, dim) if types else None
        self.norm = nn.LayerNorm(dim, eps=norm_eps) if norm_eps else None

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.tok(ids) + self.pos(pos)
        if self.typ is not None:
            x = x + self.typ.weight[0]
        return self.norm(x) if self.norm is not None else x


class Pooler(nn.Module):
    def __init__(self, dim: int = 768) -> None:
        super().__init__()
        self.dense = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(x[:, 0]))


def _bert(
    name: str, family: str, dim: int, depth: int, heads: int, vocab: int, positions: int,
    types: int, eps: float, seq_len: int,
) -> LayeredModel:  # fmt: skip
    layers: list[tuple[str, str, nn.Module]] = [
        ("embed", "embedding", TokenEmbed(vocab, positions, dim, types=types, norm_eps=eps))
    ]
    layers += [(f"encoder{i}", "encoder", PostNormBlock(dim, heads, eps)) for i in range(depth)]
    layers.append(("pooler", "head", Pooler(dim)))
    return LayeredModel(
        name, layers, InputSpec((seq_len,), torch.int64, vocab, "input_ids"), family,
        "nlp-encoder",
    )  # fmt: skip


def bert_base(seq_len: int = 128) -> LayeredModel:
    return _bert("bert-base", "bert", 768, 12, 12, 30522, 512, 2, 1e-12, seq_len)


def bert_large(seq_len: int = 128) -> LayeredModel:
    """BERT-Large (Devlin et al. 2019): 24 layers, 1,024 wide, 16 heads."""
    return _bert("bert-large", "bert", 1024, 24, 16, 30522, 512, 2, 1e-12, seq_len)


def roberta_base(seq_len: int = 128) -> LayeredModel:
    """RoBERTa-Base (Liu et al. 2019): BERT-Base's shape with a 50,265-token vocabulary,
    514 positions, one token type and LayerNorm eps 1e-5."""
    return _bert("roberta-base", "roberta", 768, 12, 12, 50265, 514, 1, 1e-5, seq_len)


def roberta_large(seq_len: int = 128) -> LayeredModel:
    return _bert("roberta-large", "roberta", 1024, 24, 16, 50265, 514, 1, 1e-5, seq_len)


class LMHead(nn.Module):
    def __init__(self, dim: int, vocab: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=1e-5)
        self.fc = nn.Linear(dim, vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.norm(x))


def _gpt2(name: str, dim: int, depth: int, heads: int, seq_len: int) -> LayeredModel:
    layers: list[tuple[str, str, nn.Module]] = [
        ("embed", "embedding", TokenEmbed(50257, 1024, dim))
    ]
    layers += [
        (f"block{i}", "decoder", PreNormBlock(dim, heads, 1e-5, causal=True, approximate="tanh"))
        for i in range(depth)
    ]
    layers.append(("lm_head", "head", LMHead(dim, 50257)))
    return LayeredModel(
        name, layers, InputSpec((seq_len,), torch.int64, 50257, "input_ids"), "gpt2",
        "nlp-decoder",
    )  # fmt: skip


def gpt2_small(seq_len: int = 128) -> LayeredModel:
    """GPT-2 small. The LM head has its own copy of the token-embedding matrix (GPT-2 ties
    them), because blocks may run on different workers: each needs the weights."""
    return _gpt2("gpt2", 768, 12, 12, seq_len)


def gpt2_medium(seq_len: int = 128) -> LayeredModel:
    """GPT-2 Medium: 24 layers, 1,024 wide, 16 heads (untied LM head as in GPT-2 small)."""
    return _gpt2("gpt2-medium", 1024, 24, 16, seq_len)
