"""The classic ImageNet CNNs that MagicBatch evaluates: VGG-16 and GoogLeNet.

Architectures as their papers define them: VGG-16 is configuration D of Simonyan &
Zisserman (ICLR 2015: thirteen 3x3 convolutions with ReLU, five max-pools, three fully
connected layers 4096-4096-1000 with dropout); GoogLeNet is Szegedy et al. (CVPR 2015,
Table 1: the 7x7 stem with local response normalisation, nine Inception modules with true
5x5 branches, average pooling, dropout 0.4 and one classifier; the auxiliary classifiers
are training-only and left out). Convolutions carry biases and no batch normalisation, as
in the papers. Weights are random.
"""

from __future__ import annotations

import torch
from torch import nn

from hetserve.zoo.layered import InputSpec, LayeredModel

Layers = list[tuple[str, str, nn.Module]]


def _conv(cin: int, cout: int, k: int, stride: int = 1, padding: int = 0) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, padding), nn.ReLU(inplace=True))


# ------------------------------------------------------------------ VGG-16

VGG16_STAGES = ((64, 64), (128, 128), (256, 256, 256), (512, 512, 512), (512, 512, 512))


class _VggClassifier(nn.Module):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        self.fc = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(0.5),
            nn.Linear(4096, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(0.5),
            nn.Linear(4096, classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(x, 1))


def vgg16() -> LayeredModel:
    """One layer per convolution (the stage's max-pool rides with its last one)."""
    layers: Layers = []
    cin = 3
    for s, widths in enumerate(VGG16_STAGES, start=1):
        for i, cout in enumerate(widths, start=1):
            mods: list[nn.Module] = [_conv(cin, cout, 3, padding=1)]
            if i == len(widths):
                mods.append(nn.MaxPool2d(2, 2))
            layers.append((f"conv{s}_{i}", "conv", nn.Sequential(*mods)))
            cin = cout
    layers.append(("classifier", "head", _VggClassifier()))
    return LayeredModel("vgg16", layers, InputSpec((3, 224, 224)), "vgg", "classification")


# ------------------------------------------------------------------ GoogLeNet

# name: (in, #1x1, #3x3 reduce, #3x3, #5x5 reduce, #5x5, pool proj) — Szegedy et al. Table 1
GOOGLENET_MODULES = {
    "inception_3a": (192, 64, 96, 128, 16, 32, 32),
    "inception_3b": (256, 128, 128, 192, 32, 96, 64),
    "inception_4a": (480, 192, 96, 208, 16, 48, 64),
    "inception_4b": (512, 160, 112, 224, 24, 64, 64),
    "inception_4c": (512, 128, 128, 256, 24, 64, 64),
    "inception_4d": (512, 112, 144, 288, 32, 64, 64),
    "inception_4e": (528, 256, 160, 320, 32, 128, 128),
    "inception_5a": (832, 256, 160, 320, 32, 128, 128),
    "inception_5b": (832, 384, 192, 384, 48, 128, 128),
}


class InceptionV1(nn.Module):
    """Four parallel branches concatenated along channels."""

    def __init__(self, cin: int, c1: int, r3: int, c3: int, r5: int, c5: int, pp: int) -> None:
        super().__init__()
        self.b1 = _conv(cin, c1, 1)
        self.b3 = nn.Sequential(_conv(cin, r3, 1), _conv(r3, c3, 3, padding=1))
        self.b5 = nn.Sequential(_conv(cin, r5, 1), _conv(r5, c5, 5, padding=2))
        self.bp = nn.Sequential(nn.MaxPool2d(3, 1, 1), _conv(cin, pp, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b1(x), self.b3(x), self.b5(x), self.bp(x)], 1)


class _GoogLeNetHead(nn.Module):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.dropout = nn.Dropout(0.4)
        self.fc = nn.Linear(1024, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.dropout(torch.flatten(self.pool(x), 1)))


def googlenet() -> LayeredModel:
    def pool() -> nn.MaxPool2d:
        return nn.MaxPool2d(3, 2, ceil_mode=True)

    layers: Layers = [
        ("conv1", "stem", nn.Sequential(_conv(3, 64, 7, 2, 3), pool(), nn.LocalResponseNorm(5))),
        ("conv2_reduce", "conv", _conv(64, 64, 1)),
        ("conv2", "conv", nn.Sequential(_conv(64, 192, 3, padding=1), nn.LocalResponseNorm(5))),
        ("pool2", "pool", pool()),
    ]
    for name, spec in GOOGLENET_MODULES.items():
        layers.append((name, "inception", InceptionV1(*spec)))
        if name in ("inception_3b", "inception_4e"):
            layers.append((f"pool{name[-2]}", "pool", pool()))
    layers.append(("head", "head", _GoogLeNetHead()))
    return LayeredModel(
        "googlenet", layers, InputSpec((3, 224, 224)), "inception", "classification"
    )
