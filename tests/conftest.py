import importlib.util

import pytest

HAS_TORCH = importlib.util.find_spec("torch") is not None


def pytest_collection_modifyitems(config, items):
    if HAS_TORCH:
        return
    skip = pytest.mark.skip(reason="PyTorch is not installed (the torch extra)")
    for item in items:
        if "torch" in item.keywords:
            item.add_marker(skip)
