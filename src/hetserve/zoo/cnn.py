"""Convolutional networks: ResNet, DenseNet, Inception-v3, EfficientNet, ConvNeXt, and the
dense-prediction models (FCN segmentation, ResNet-FPN detection backbone).

Architectures follow the original papers (He et al. 2016 with the stride on the 3x3
convolution; Huang et al. 2017; Szegedy et al. 2016; Tan & Le 2019; Liu et al. 2022;
Long et al. 2015; Lin et al. 2017). Weights are random.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from hetserve.zoo.layered import Carry, InputSpec, LayeredModel, conv_bn

Layers = list[tuple[str, str, nn.Module]]

# ------------------------------------------------------------------ ResNet


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(
        self, cin: int, planes: int, stride: int = 1, dilation: int = 1, prev_dilation: int = 1
    ) -> None:
        super().__init__()
        self.c1 = conv_bn(cin, planes, 3, stride, dilation, dilation=dilation)
        self.c2 = conv_bn(planes, planes, 3, 1, dilation, dilation=dilation, act=None)
        self.down = (
            conv_bn(cin, planes, 1, stride, act=None) if stride != 1 or cin != planes else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        idt = x if self.down is None else self.down(x)
        return F.relu(self.c2(self.c1(x)) + idt)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(
        self, cin: int, planes: int, stride: int = 1, dilation: int = 1, prev_dilation: int = 1
    ) -> None:
        super().__init__()
        out = planes * 4
        self.c1 = conv_bn(cin, planes, 1)
        d = prev_dilation if stride != 1 or cin != out else dilation
        self.c2 = conv_bn(planes, planes, 3, stride, d, dilation=d)
        self.c3 = conv_bn(planes, out, 1, act=None)
        self.down = conv_bn(cin, out, 1, stride, act=None) if stride != 1 or cin != out else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        idt = x if self.down is None else self.down(x)
        return F.relu(self.c3(self.c2(self.c1(x))) + idt)


class ClassifierHead(nn.Module):
    def __init__(self, cin: int, classes: int = 1000, dropout: float = 0.0) -> None:
        super().__init__()
        self.fc = nn.Linear(cin, classes)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.dropout(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)))


def _resnet_stages(
    depth: int, dilate: tuple[bool, bool, bool] = (False, False, False)
) -> list[list[tuple[str, str, nn.Module]]]:
    cfg = {
        18: (BasicBlock, (2, 2, 2, 2)),
        34: (BasicBlock, (3, 4, 6, 3)),
        50: (Bottleneck, (3, 4, 6, 3)),
        101: (Bottleneck, (3, 4, 23, 3)),
        152: (Bottleneck, (3, 8, 36, 3)),
    }
    block, counts = cfg[depth]
    kind = "bottleneck" if block is Bottleneck else "basic"
    stages = []
    cin, dilation = 64, 1
    for s, (n, planes) in enumerate(zip(counts, (64, 128, 256, 512), strict=True)):
        stride = 1 if s == 0 else 2
        prev = dilation
        if s > 0 and dilate[s - 1]:
            dilation *= stride
            stride = 1
        layers = []
        for i in range(n):
            m = block(cin, planes, stride if i == 0 else 1, dilation, prev)
            cin = planes * block.expansion
            layers.append((f"layer{s + 1}.{i}", kind, m))
        stages.append(layers)
    return stages


def resnet_stem() -> nn.Module:
    return nn.Sequential(conv_bn(3, 64, 7, 2, 3), nn.MaxPool2d(3, 2, 1))


def resnet(depth: int) -> LayeredModel:
    layers: Layers = [("stem", "stem", resnet_stem())]
    for stage in _resnet_stages(depth):
        layers += stage
    width = 512 * (4 if depth >= 50 else 1)
    layers.append(("head", "head", ClassifierHead(width)))
    return LayeredModel(
        f"resnet{depth}", layers, InputSpec((3, 224, 224)), "resnet", "classification"
    )


# ------------------------------------------------------------------ DenseNet


class DenseLayer(nn.Module):
    def __init__(self, cin: int, growth: int = 32, bn_size: int = 4) -> None:
        super().__init__()
        self.f = nn.Sequential(
            nn.BatchNorm2d(cin),
            nn.ReLU(inplace=True),
            nn.Conv2d(cin, bn_size * growth, 1, bias=False),
            nn.BatchNorm2d(bn_size * growth),
            nn.ReLU(inplace=True),
            nn.Conv2d(bn_size * growth, growth, 3, padding=1, bias=False),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, self.f(x)], 1)


def densenet121() -> LayeredModel:
    growth, cin = 32, 64
    layers: Layers = [("stem", "stem", resnet_stem())]
    for b, n in enumerate((6, 12, 24, 16)):
        for i in range(n):
            layers.append((f"block{b + 1}.{i}", "dense", DenseLayer(cin, growth)))
            cin += growth
        if b < 3:
            layers.append(
                (
                    f"transition{b + 1}",
                    "transition",
                    nn.Sequential(
                        nn.BatchNorm2d(cin),
                        nn.ReLU(inplace=True),
                        nn.Conv2d(cin, cin // 2, 1, bias=False),
                        nn.AvgPool2d(2, 2),
                    ),
                )
            )
            cin //= 2
    layers.append(
        (
            "head",
            "head",
            nn.Sequential(nn.BatchNorm2d(cin), nn.ReLU(inplace=True), ClassifierHead(cin)),
        )
    )
    return LayeredModel(
        "densenet121", layers, InputSpec((3, 224, 224)), "densenet", "classification"
    )


# ------------------------------------------------------------------ Inception-v3


def bc(
    cin: int, cout: int, k: int | tuple[int, int], s: int = 1, p: int | tuple[int, int] = 0
) -> nn.Sequential:
    return conv_bn(cin, cout, k, s, p, eps=1e-3)


class _Branches(nn.Module):
    """Concatenates the outputs of parallel branches along channels."""

    def __init__(self, *branches: nn.Module) -> None:
        super().__init__()
        self.branches = nn.ModuleList(branches)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outs = []
        for b in self.branches:
            y = b(x)
            outs.extend(y if isinstance(y, list) else [y])
        return torch.cat(outs, 1)


class _Split(nn.Module):
    """A stem followed by two parallel 1x3 / 3x1 convolutions (Inception-E)."""

    def __init__(self, stem: nn.Module, cin: int) -> None:
        super().__init__()
        self.stem = stem
        self.a = bc(cin, 384, (1, 3), p=(0, 1))
        self.b = bc(cin, 384, (3, 1), p=(1, 0))

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        y = self.stem(x)
        return [self.a(y), self.b(y)]


def _avg_then(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.AvgPool2d(3, 1, 1), bc(cin, cout, 1))


def inception_a(cin: int, pool: int) -> nn.Module:
    return _Branches(
        bc(cin, 64, 1),
        nn.Sequential(bc(cin, 48, 1), bc(48, 64, 5, p=2)),
        nn.Sequential(bc(cin, 64, 1), bc(64, 96, 3, p=1), bc(96, 96, 3, p=1)),
        _avg_then(cin, pool),
    )


def inception_b(cin: int) -> nn.Module:
    return _Branches(
        bc(cin, 384, 3, 2),
        nn.Sequential(bc(cin, 64, 1), bc(64, 96, 3, p=1), bc(96, 96, 3, 2)),
        nn.MaxPool2d(3, 2),
    )


def inception_c(cin: int, c7: int) -> nn.Module:
    return _Branches(
        bc(cin, 192, 1),
        nn.Sequential(bc(cin, c7, 1), bc(c7, c7, (1, 7), p=(0, 3)), bc(c7, 192, (7, 1), p=(3, 0))),
        nn.Sequential(
            bc(cin, c7, 1),
            bc(c7, c7, (7, 1), p=(3, 0)),
            bc(c7, c7, (1, 7), p=(0, 3)),
            bc(c7, c7, (7, 1), p=(3, 0)),
            bc(c7, 192, (1, 7), p=(0, 3)),
        ),
        _avg_then(cin, 192),
    )


def inception_d(cin: int) -> nn.Module:
    return _Branches(
        nn.Sequential(bc(cin, 192, 1), bc(192, 320, 3, 2)),
        nn.Sequential(
            bc(cin, 192, 1),
            bc(192, 192, (1, 7), p=(0, 3)),
            bc(192, 192, (7, 1), p=(3, 0)),
            bc(192, 192, 3, 2),
        ),
        nn.MaxPool2d(3, 2),
    )


def inception_e(cin: int) -> nn.Module:
    return _Branches(
        bc(cin, 320, 1),
        _Split(bc(cin, 384, 1), 384),
        _Split(nn.Sequential(bc(cin, 448, 1), bc(448, 384, 3, p=1)), 384),
        _avg_then(cin, 192),
    )


def inception_v3() -> LayeredModel:
    layers: Layers = [
        ("Conv2d_1a", "stem", bc(3, 32, 3, 2)),
        ("Conv2d_2a", "conv", bc(32, 32, 3)),
        ("Conv2d_2b", "conv", nn.Sequential(bc(32, 64, 3, p=1), nn.MaxPool2d(3, 2))),
        ("Conv2d_3b", "conv", bc(64, 80, 1)),
        ("Conv2d_4a", "conv", nn.Sequential(bc(80, 192, 3), nn.MaxPool2d(3, 2))),
        ("Mixed_5b", "inception", inception_a(192, 32)),
        ("Mixed_5c", "inception", inception_a(256, 64)),
        ("Mixed_5d", "inception", inception_a(288, 64)),
        ("Mixed_6a", "inception", inception_b(288)),
        ("Mixed_6b", "inception", inception_c(768, 128)),
        ("Mixed_6c", "inception", inception_c(768, 160)),
        ("Mixed_6d", "inception", inception_c(768, 160)),
        ("Mixed_6e", "inception", inception_c(768, 192)),
        ("Mixed_7a", "inception", inception_d(768)),
        ("Mixed_7b", "inception", inception_e(1280)),
        ("Mixed_7c", "inception", inception_e(2048)),
        ("head", "head", ClassifierHead(2048, dropout=0.5)),
    ]
    return LayeredModel(
        "inception-v3", layers, InputSpec((3, 299, 299)), "inception", "classification"
    )


# ------------------------------------------------------------------ EfficientNet


class SqueezeExcite(nn.Module):
    def __init__(self, c: int, squeeze: int) -> None:
        super().__init__()
        self.reduce = nn.Conv2d(c, squeeze, 1)
        self.expand = nn.Conv2d(squeeze, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.adaptive_avg_pool2d(x, 1)
        return x * torch.sigmoid(self.expand(F.silu(self.reduce(s))))


class MBConv(nn.Module):
    def __init__(self, cin: int, cout: int, expand: int, k: int, stride: int) -> None:
        super().__init__()
        mid = cin * expand
        mods: list[nn.Module] = []
        if expand != 1:
            mods.append(conv_bn(cin, mid, 1, act=nn.SiLU, eps=1e-3))
        mods += [
            conv_bn(mid, mid, k, stride, k // 2, groups=mid, act=nn.SiLU, eps=1e-3),
            SqueezeExcite(mid, max(1, cin // 4)),
            conv_bn(mid, cout, 1, act=None, eps=1e-3),
        ]
        self.f = nn.Sequential(*mods)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.f(x)
        return y + x if self.residual else y


# expand, kernel, stride, channels, repeats (EfficientNet-B0, Tan & Le 2019, Table 1)
_B0 = (
    (1, 3, 1, 16, 1),
    (6, 3, 2, 24, 2),
    (6, 5, 2, 40, 2),
    (6, 3, 2, 80, 3),
    (6, 5, 1, 112, 3),
    (6, 5, 2, 192, 4),
    (6, 3, 1, 320, 1),
)
# width, depth, resolution, dropout
EFFICIENTNET = {"b0": (1.0, 1.0, 224, 0.2), "b4": (1.4, 1.8, 380, 0.4), "b8": (2.2, 3.6, 672, 0.5)}


def _round_filters(c: float, width: float, divisor: int = 8) -> int:
    c *= width
    new = max(divisor, int(c + divisor / 2) // divisor * divisor)
    return int(new + divisor) if new < 0.9 * c else int(new)


def efficientnet(variant: str) -> LayeredModel:
    width, depth, res, dropout = EFFICIENTNET[variant]
    cin = _round_filters(32, width)
    layers: Layers = [("stem", "stem", conv_bn(3, cin, 3, 2, 1, act=nn.SiLU, eps=1e-3))]
    for s, (e, k, st, c, r) in enumerate(_B0):
        cout = _round_filters(c, width)
        for i in range(math.ceil(r * depth)):
            layers.append(
                (f"stage{s + 1}.{i}", "mbconv", MBConv(cin, cout, e, k, st if i == 0 else 1))
            )
            cin = cout
    head = _round_filters(1280, width)
    layers.append(
        (
            "head",
            "head",
            nn.Sequential(
                conv_bn(cin, head, 1, act=nn.SiLU, eps=1e-3), ClassifierHead(head, dropout=dropout)
            ),
        )
    )
    return LayeredModel(
        f"efficientnet-{variant}",
        layers,
        InputSpec((3, res, res)),
        "efficientnet",
        "classification",
    )


# ------------------------------------------------------------------ ConvNeXt


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of an NCHW tensor."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pw1 = nn.Linear(dim, 4 * dim)
        self.pw2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 1e-6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.pw2(F.gelu(self.pw1(self.norm(y)))) * self.gamma
        return x + y.permute(0, 3, 1, 2)


def convnext_tiny() -> LayeredModel:
    dims, depths = (96, 192, 384, 768), (3, 3, 9, 3)
    layers: Layers = [
        ("stem", "stem", nn.Sequential(nn.Conv2d(3, 96, 4, 4), LayerNorm2d(96, eps=1e-6)))
    ]
    for s, (d, n) in enumerate(zip(dims, depths, strict=True)):
        if s > 0:
            layers.append(
                (
                    f"downsample{s}",
                    "downsample",
                    nn.Sequential(
                        LayerNorm2d(dims[s - 1], eps=1e-6), nn.Conv2d(dims[s - 1], d, 2, 2)
                    ),
                )
            )
        for i in range(n):
            layers.append((f"stage{s + 1}.{i}", "convnext", ConvNeXtBlock(d)))

    class Head(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = nn.LayerNorm(768, eps=1e-6)
            self.fc = nn.Linear(768, 1000)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(self.norm(x.mean((2, 3))))

    layers.append(("head", "head", Head()))
    return LayeredModel(
        "convnext-t", layers, InputSpec((3, 224, 224)), "convnext", "classification"
    )


# ------------------------------------------------------------------ dense prediction


class FCNHead(nn.Module):
    def __init__(self, cin: int, classes: int, out_hw: tuple[int, int]) -> None:
        super().__init__()
        self.f = nn.Sequential(
            conv_bn(cin, cin // 4, 3, padding=1), nn.Dropout(0.1), nn.Conv2d(cin // 4, classes, 1)
        )
        self.out_hw = out_hw

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(self.f(x), size=self.out_hw, mode="bilinear", align_corners=False)


def fcn_resnet101(size: int = 512, classes: int = 21) -> LayeredModel:
    """FCN (Long et al. 2015) on a dilated ResNet-101 (output stride 8), 21 classes."""
    layers: Layers = [("stem", "stem", resnet_stem())]
    for stage in _resnet_stages(101, dilate=(False, True, True)):
        layers += stage
    layers.append(("head", "head", FCNHead(2048, classes, (size, size))))
    return LayeredModel("fcn-resnet101", layers, InputSpec((3, size, size)), "fcn", "segmentation")


class FPN(nn.Module):
    """Feature pyramid (Lin et al. 2017) over C2..C5 with an extra max-pooled P6."""

    def __init__(
        self, in_channels: tuple[int, ...] = (256, 512, 1024, 2048), out: int = 256
    ) -> None:
        super().__init__()
        self.lateral = nn.ModuleList([nn.Conv2d(c, out, 1) for c in in_channels])
        self.output = nn.ModuleList([nn.Conv2d(out, out, 3, padding=1) for _ in in_channels])

    def forward(self, state: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        c5, *rest = state
        feats = [*rest, c5]  # C2, C3, C4, C5
        top = self.lateral[-1](feats[-1])
        outs = [self.output[-1](top)]
        for i in range(len(feats) - 2, -1, -1):
            lat = self.lateral[i](feats[i])
            top = lat + F.interpolate(top, size=lat.shape[-2:], mode="nearest")
            outs.insert(0, self.output[i](top))
        outs.append(F.max_pool2d(outs[-1], 1, 2))
        return tuple(outs)  # P2..P6


def resnet50_fpn(size: int = 640) -> LayeredModel:
    """Detection backbone: ResNet-50 with an FPN (P2..P6, 256 channels). The stage
    outputs C2..C4 travel with the activations, so a cut inside the backbone carries
    them."""
    layers: Layers = [("stem", "stem", resnet_stem())]
    stages = _resnet_stages(50)
    for s, stage in enumerate(stages):
        for i, (name, kind, m) in enumerate(stage):
            keep = s < 3 and i == len(stage) - 1
            layers.append((name, kind, Carry(m, keep=keep)))
    layers.append(("fpn", "fpn", FPN()))
    return LayeredModel("resnet50-fpn", layers, InputSpec((3, size, size)), "fpn", "detection")
