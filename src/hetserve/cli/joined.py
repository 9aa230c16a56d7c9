"""``hetserve serve --address``: join the Ray cluster, read it, and check the cluster file
and the plan against it before anything starts (docs/deployment.md)."""

from __future__ import annotations

from typing import Any

from hetserve.cli.common import console
from hetserve.core.errors import HetserveError


def runtime_env_of(path: str | None) -> dict[str, Any] | None:
    """``--runtime-env FILE``: Ray's runtime_env as a mapping (YAML or JSON)."""
    if path is None:
        return None
    from hetserve.core.files import read_yaml

    data = read_yaml(path, "runtime_env")
    if not isinstance(data, dict):
        raise HetserveError(
            f"{path}: expected a mapping of Ray runtime_env fields (pip, py_modules, "
            f"working_dir, env_vars, ...)"
        )
    return data


def discovered_cluster(
    address: str, cluster_name: str | None, plan_file: str | None, runtime_env: Any
) -> tuple[Any, Any]:
    """Join the cluster at ``address`` and read it; check the given cluster file and plan
    against it. The cluster to plan and serve with, and what discovery found."""
    from hetserve.core.gpus import DEFAULT_CATALOG
    from hetserve.core.presets import load_cluster
    from hetserve.runtime.discovery import check_plan_fits, check_versions, compare, discover
    from hetserve.runtime.ray_session import connect

    given = load_cluster(cluster_name) if cluster_name is not None else None
    connect(address, runtime_env)
    found = discover(address, given.catalog if given is not None else DEFAULT_CATALOG)
    check_versions(found)
    if given is not None:
        compare(given, found, str(cluster_name))
    cluster = given if given is not None else found.cluster()
    if plan_file is not None:
        from hetserve.core.placement import gpus_needed
        from hetserve.core.plan import Plan

        check_plan_fits(gpus_needed(Plan.load(plan_file), cluster.catalog), found, plan_file)
    console.print(
        f"hetserve: the Ray cluster at {found.address}: "
        + ", ".join(f"{n.name} ({n.shape})" for n in found.nodes),
        markup=False,
    )
    return cluster, found
