import importlib.util

import pytest

HAS_TORCH = importlib.util.find_spec("torch") is not None


def pytest_collection_modifyitems(config, items):
    # under pytest-xdist's --dist loadgroup (make test), a module's tests stay on one worker
    # (its module-scoped fixtures, such as a study's run, are built once) unless the module
    # or test names its group: every test that starts Ray is in "ray", one Ray at a time
    # (two starting together can time out)
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
    if HAS_TORCH:
        return
    skip = pytest.mark.skip(reason="PyTorch is not installed (the torch extra)")
    for item in items:
        if "torch" in item.keywords:
            item.add_marker(skip)
