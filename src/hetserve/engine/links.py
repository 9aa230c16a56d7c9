"""The one link model, below both engines (``docs/design.md``): directed links with lanes,
FIFO, held end to end (:class:`LinkTable`: the kernel takes a lane per activation
transfer); and the host links that planned loads and DHA runs share (:class:`HostLinks`:
the modelled executor's). Both are written in ``engine/entities_core.py`` and compiled
with the kernel's entities where the package was built with Cython.

Every directed link of the cluster (NIC uplinks and downlinks, switch links, PCIe, NVLink)
has lanes, each free from some time on. A transfer over a path starts when every link on the
path has a free lane (FIFO in submission order), holds them all for
``bytes / bottleneck bandwidth`` plus the path's propagation delay, and so no lane ever
carries two transfers at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hetserve.engine import entities

__all__ = ["HostLinks", "LinkTable"]

if TYPE_CHECKING:  # (the same classes, as a type checker reads them)
    from hetserve.engine.entities_core import HostLinks, LinkTable
else:
    HostLinks, LinkTable = entities.HostLinks, entities.LinkTable
