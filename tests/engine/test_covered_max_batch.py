"""``engine.setup.covered_max_batch``: the largest batch size the latency model covers for
every model on every GPU type and share of the placement. The roofline model is asked
about batch 2 only (its times at every size come from one computation); the answer must
be what asking about every size says (written out here, not the function's loop)."""

from dataclasses import replace

import pytest

from hetserve.core.errors import HetserveError
from hetserve.core.latency import RooflineModel
from hetserve.engine.setup import build_setup, covered_max_batch


def _every_size(setup, limit: int) -> int:
    """The largest ``b <= limit`` such that every batch size 1..b of every model on every
    GPU type and share of the placement has a latency (asked one by one)."""
    kinds = {(w.gpu, w.share) for w in setup.placement.workers}
    for b in range(2, limit + 1):
        for m in setup.models:
            for gpu, share in kinds:
                try:
                    setup.latency.latency(m, gpu, share, b)
                except HetserveError:
                    return b - 1
    return limit


class _Capped(RooflineModel):
    """A roofline model that has no batch above ``cap`` (not a plain ``RooflineModel``: it
    is asked about every size)."""

    def __init__(self, cap: int, **kw) -> None:
        super().__init__(**kw)
        self.cap = cap

    def latency(self, model, gpu, share, batch, blocks=None):
        if batch > self.cap:
            raise HetserveError(f"{model}: no batch {batch}")
        return super().latency(model, gpu, share, batch, blocks)


@pytest.fixture(scope="module")
def setup():
    return build_setup("hc1-l", ["resnet18", "bert-base"])


@pytest.mark.parametrize("limit", [1, 2, 8, 128])
def test_the_roofline_covers_every_size_up_to_the_limit(setup, limit):
    assert type(setup.latency) is RooflineModel
    assert covered_max_batch(setup, limit) == _every_size(setup, limit) == limit


@pytest.mark.parametrize("cap", [1, 3, 8])
def test_a_model_that_stops_short_is_asked_about_every_size(setup, cap):
    capped = replace(setup, latency=_Capped(cap))
    assert covered_max_batch(capped, 128) == _every_size(capped, 128) == cap


def test_a_model_the_roofline_lacks_covers_batch_1_only(setup):
    odd = replace(setup, models=[*setup.models, "no-such-model"])
    with pytest.raises(HetserveError):
        odd.latency.latency("no-such-model", setup.placement.workers[0].gpu, 1, 2)
    assert covered_max_batch(odd, 128) == _every_size(odd, 128) == 1
