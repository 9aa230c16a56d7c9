"""The KubeRay manifest in docs/deployment.md: parsed, and its structure checked against
the fields of KubeRay's RayCluster (v1) that a hetserve deployment relies on. No
Kubernetes API server or CRD validator is used (none is available here); the docs say so."""

import json
import re
from pathlib import Path

import yaml

from hetserve.core.gpus import DEFAULT_CATALOG

DOC = Path(__file__).resolve().parents[1] / "docs" / "deployment.md"


def _manifest():
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S)
    found = [yaml.safe_load(b) for b in blocks if "kind: RayCluster" in b]
    assert len(found) == 1
    return found[0]


def test_the_rayclusters_groups_declare_catalog_gpu_types():
    m = _manifest()
    assert m["apiVersion"] == "ray.io/v1" and m["kind"] == "RayCluster"
    spec = m["spec"]
    head = spec["headGroupSpec"]
    assert head["rayStartParams"]["num-gpus"] == "0"
    assert "hetserve serve --address" in " ".join(head["template"]["spec"]["containers"][0]["args"])
    types = []
    for g in spec["workerGroupSpecs"]:
        assert {"groupName", "replicas", "minReplicas", "maxReplicas", "rayStartParams",
                "template"} <= set(g)  # fmt: skip
        assert g["minReplicas"] <= g["replicas"] <= g["maxReplicas"]
        params = g["rayStartParams"]
        # KubeRay passes rayStartParams values as strings; resources is a quoted JSON object
        resources = json.loads(json.loads(params["resources"]))
        if len(resources) == 1:  # one type: Ray's accelerator_type convention
            (key,) = resources
            assert key.startswith("accelerator_type:")
            shape = key.split(":", 1)[1]
            t = [shape]
        else:  # several types: hetserve_gpu:<T> with each type's count, summing to num-gpus
            assert all(k.startswith("hetserve_gpu:") for k in resources)
            assert sum(resources.values()) == int(params["num-gpus"])
            t = [k.split(":", 1)[1] for k in resources]
            shape = "+".join(sorted(t))
        assert all(DEFAULT_CATALOG.get(x).name == x for x in t)  # catalog types, exactly
        types.append(shape)
        (container,) = g["template"]["spec"]["containers"]
        assert str(container["resources"]["limits"]["nvidia.com/gpu"]) == params["num-gpus"]
    assert len(set(types)) == len(types) >= 3  # one group per node shape, a mixed one too
