import fcntl
import importlib.util
import os

import pytest

HAS_TORCH = importlib.util.find_spec("torch") is not None
UNGROUPED_KEY = pytest.StashKey[bool]()
UNGROUPED = (
    "--dist loadgroup did not group this test: this pytest and pytest-xdist do not work "
    "together (pytest 9.2 ignores where xdist 3.8 writes a test's group); install the "
    "versions in constraints.txt"
)


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    # under pytest-xdist's --dist loadgroup (make test), a module's tests stay on one worker
    # (its module-scoped fixtures, such as a study's run, are built once) unless the module
    # or test names its group: every test that starts Ray is in "ray", one Ray at a time
    # (two starting together can time out). Marked before xdist's worker reads the groups
    # in its own hook, and checked after it: the worker sends a test with its group only
    # if the test's id carries it ("id@group"). Without the group every test goes its own
    # way (two Rays start at once, a module's fixtures are built twice): fail each test
    # with the reason rather than run slow and flaky.
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
    yield
    if getattr(config.option, "loadgroup", False):
        config.stash[UNGROUPED_KEY] = any("@" not in item.nodeid for item in items)
    if not HAS_TORCH:
        skip = pytest.mark.skip(reason="PyTorch is not installed (the torch extra)")
        for item in items:
            if "torch" in item.keywords:
                item.add_marker(skip)


def pytest_runtest_setup(item):
    if item.config.stash.get(UNGROUPED_KEY, False):
        pytest.fail(UNGROUPED, pytrace=False)


@pytest.fixture(autouse=True)
def _apart_from_ray(request, tmp_path_factory):
    """Under xdist, a ``wallclock`` test (it compares a server on the wall clock with the
    simulator) never runs while the other worker runs a Ray test: Ray's processes take both
    cores and make the server's answers late. Each such test and each test of the "ray"
    group holds one lock, in the directory the workers share, while it runs."""
    node = request.node
    apart = node.get_closest_marker("wallclock") is not None or any(
        m.args[:1] == ("ray",) for m in node.iter_markers("xdist_group")
    )
    if not apart or "PYTEST_XDIST_WORKER" not in os.environ:
        yield
        return
    with open(tmp_path_factory.getbasetemp().parent / "apart-from-ray.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
