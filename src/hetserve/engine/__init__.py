"""What both engines mean by the Scheduler protocol, written once: the rules a scheduler's
actions are checked against (:mod:`hetserve.engine.rules`, one :class:`ProtocolError`), the
stage reports they send back, and the link model they move activations and weights over
(:mod:`hetserve.engine.links`). The simulator (:mod:`hetserve.sim`) and the runtime
(:mod:`hetserve.runtime`) are drivers on top: a virtual clock with modelled workers, a
wall clock with real or emulated ones (``docs/design.md``)."""

from hetserve.engine.links import HostLinks, LinkTable
from hetserve.engine.rules import ProtocolError

__all__ = ["HostLinks", "LinkTable", "ProtocolError"]
