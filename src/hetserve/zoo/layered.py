"""A model as an ordered list of layers that can run block by block.

Each layer takes the previous layer's output (a tensor, or a tuple of tensors where later
layers need skip tensors, e.g. the FPN's stage outputs) and returns its own. Running
``layers[a:b]`` on one worker and ``layers[b:c]`` on another is the same computation as
running the whole model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True)
class InputSpec:
    shape: tuple[int, ...]  # per request, without the batch dimension
    dtype: torch.dtype = torch.float32
    vocab: int = 0  # for token inputs: ids are drawn from 0..vocab-1
    name: str = "input"  # the tensor's name in the serving protocol

    def example(self, batch: int = 1, seed: int = 0) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        if self.dtype.is_floating_point:
            return torch.randn((batch, *self.shape), generator=g, dtype=self.dtype)
        return torch.randint(0, self.vocab, (batch, *self.shape), generator=g, dtype=self.dtype)


class LayeredModel(nn.Module):
    def __init__(
        self,
        name: str,
        layers: Sequence[tuple[str, str, nn.Module]],
        input_spec: InputSpec,
        family: str,
        task: str,
        output_names: Sequence[str] = (),
    ) -> None:
        super().__init__()
        self.model_name = name
        self.layer_names = [n for n, _, _ in layers]
        self.layer_kinds = [k for _, k, _ in layers]
        self.layers = nn.ModuleList([m for _, _, m in layers])
        self.input_spec = input_spec
        self.family = family
        self.task = task
        # names of the output tensors ("output", or "output_0".. for several)
        self.output_names = tuple(output_names)

    def run_layers(self, x: Any, start: int, stop: int) -> Any:
        for layer in self.layers[start:stop]:
            x = layer(x)
        return x

    def forward(self, x: Any) -> Any:
        return self.run_layers(x, 0, len(self.layers))

    def block(self, start: int, stop: int) -> nn.Sequential:
        """Layers ``start..stop-1`` as one module (sharing the weights)."""
        return nn.Sequential(*self.layers[start:stop])


def tensors_of(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for item in x for t in tensors_of(item)]
    return []


# ----------------------------------------------------------------- common pieces


def conv_bn(
    cin: int,
    cout: int,
    k: int | tuple[int, int],
    stride: int = 1,
    padding: int | tuple[int, int] = 0,
    groups: int = 1,
    dilation: int = 1,
    act: type[nn.Module] | None = nn.ReLU,
    eps: float = 1e-5,
) -> nn.Sequential:
    mods: list[nn.Module] = [
        nn.Conv2d(cin, cout, k, stride, padding, dilation=dilation, groups=groups, bias=False),
        nn.BatchNorm2d(cout, eps=eps),
    ]
    if act is not None:
        mods.append(act(inplace=True) if act in (nn.ReLU, nn.SiLU) else act())
    return nn.Sequential(*mods)


class Carry(nn.Module):
    """Runs ``inner`` on the first element of a tuple state ``(x, *kept)`` and passes the
    kept tensors on; with ``keep`` the new ``x`` is also appended to them."""

    def __init__(self, inner: nn.Module, keep: bool = False) -> None:
        super().__init__()
        self.inner = inner
        self.keep = keep

    def forward(self, state: Any) -> tuple[torch.Tensor, ...]:
        if isinstance(state, torch.Tensor):
            state = (state,)
        y = self.inner(state[0])
        kept = tuple(state[1:]) + ((y,) if self.keep else ())
        return (y, *kept)
