"""The zoo's registry: model name -> builder (random weights; nothing is downloaded)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch

from hetserve.core.errors import HetserveError, unknown
from hetserve.core.models import ZOO, ModelCatalog
from hetserve.zoo import classic, cnn, transformers
from hetserve.zoo.layered import LayeredModel

MODELS: dict[str, Callable[[], LayeredModel]] = {
    "resnet18": partial(cnn.resnet, 18),
    "resnet50": partial(cnn.resnet, 50),
    "resnet101": partial(cnn.resnet, 101),
    "resnet152": partial(cnn.resnet, 152),
    "densenet121": cnn.densenet121,
    "inception-v3": cnn.inception_v3,
    "vgg16": classic.vgg16,
    "googlenet": classic.googlenet,
    "efficientnet-b0": partial(cnn.efficientnet, "b0"),
    "efficientnet-b4": partial(cnn.efficientnet, "b4"),
    "efficientnet-b8": partial(cnn.efficientnet, "b8"),
    "convnext-t": cnn.convnext_tiny,
    "vit-b16": transformers.vit_b16,
    "bert-base": transformers.bert_base,
    "bert-large": transformers.bert_large,
    "roberta-base": transformers.roberta_base,
    "roberta-large": transformers.roberta_large,
    "gpt2": transformers.gpt2_small,
    "gpt2-medium": transformers.gpt2_medium,
    "fcn-resnet101": cnn.fcn_resnet101,
    "resnet50-fpn": cnn.resnet50_fpn,
}


SEQUENCE_MODELS = frozenset(
    {"bert-base", "bert-large", "roberta-base", "roberta-large", "gpt2", "gpt2-medium"}
)


def build(
    name: str,
    seed: int = 0,
    seq_len: int | None = None,
    version: int | None = None,
    model_catalog: ModelCatalog = ZOO,
) -> LayeredModel:
    """A zoo model in eval mode with seeded random weights; ``seq_len`` sets a token
    model's sequence length (default 128). A model of ``model_catalog``'s source (a model
    repository) is built with its own weights, of ``version`` (default: its newest served
    one)."""
    key = name.lower().replace("_", "-")
    if key not in MODELS:
        if model_catalog.source is not None and name in model_catalog.source:
            if seq_len is not None:
                raise HetserveError(f"model {name}: a repository model's shapes are fixed")
            return model_catalog.source.build(name, version)  # type: ignore[no-any-return]
        raise unknown(
            "model",
            name,
            [*MODELS, *(model_catalog.source.names() if model_catalog.source else [])],
        )
    if version not in (None, 1):
        raise HetserveError(f"model {name}: a zoo model has the one version 1")
    torch.manual_seed(seed)
    if seq_len is None:
        return MODELS[key]().eval()
    if key not in SEQUENCE_MODELS:
        raise HetserveError(f"model {name}: only token models take a sequence length")
    return MODELS[key](seq_len=seq_len).eval()


def build_from(catalog: ModelCatalog, name: str, version: int | None = None) -> LayeredModel:
    """:func:`build` of ``catalog``'s model: with ``functools.partial(build_from,
    catalog)``, a picklable builder for workers in other processes."""
    return build(name, version=version, model_catalog=catalog)


def builder(catalog: ModelCatalog = ZOO) -> Callable[..., LayeredModel]:
    """The models' builder for workers (``build(name, version=None)``): picklable, so it
    carries ``catalog`` (a repository pickles as its root) to other processes."""
    return partial(build_from, catalog)
