"""MagicBatch's planning (DataCom 2022, section 4): for each stream, a batch size per GPU
type, and an assignment of streams to GPUs with the least energy.

The batch choice, the exact assignment, PSO-GA, the paper's FCFS and Greedy baselines,
and ``shared``; plans serve with the ``magicbatch`` scheduler
(:mod:`hetserve.scheduling.magicbatch`), the study is :mod:`hetserve.experiments.magicbatch`.

**Batch choice** (Eqs. 2-4). Stream ``m`` sends ``r_m`` requests/s with deadline ``D_m``.
On GPU type ``n`` a batch of ``B`` waits ``(B - 1) / r_m`` for its last request (the first
request waits longest, Eq. 2), then runs for ``exec_n(B)``; energy per request is
``E_batch(B) / B`` (Eq. 3). The largest ``B`` with ``(B - 1) / r_m + exec_n(B) <= D_m``
(Eq. 4) minimises the energy per request; we also require that the GPU keeps up,
``exec_n(B) <= B / r_m`` (the paper assumes it silently). A type where no ``B`` satisfies
both is infeasible for the stream, with the reason recorded.

**Assignment** (Eqs. 5-9). Each stream runs on one GPU of its own; the energy of an
assignment is ``sum_m E_request(n_m, m) * r_m`` (J/s, Eq. 5 per second). ``exact`` solves
the problem exactly: it is a rectangular assignment problem (streams x GPU instances),
solved as a transportation LP over streams x GPU types with HiGHS (its matrix is totally
unimodular, so the simplex's vertex optimum is integral; the status and the integrality are
checked); a stream that cannot be placed (infeasible
everywhere, or more streams than GPUs) is rejected, and the solver first places as many
streams as possible, then minimises energy among those placements (rejection costs more
than any placement). ``fcfs``: GPUs numbered by how advanced they are (oldest first, then
by peak FP32), each stream in order takes the lowest-numbered idle GPU that can serve it.
``greedy``: each stream in order takes the idle GPU of the type with the least energy for
it (section 5.1).
"""

from __future__ import annotations

from hetserve.planning.magicbatch.assign import assign
from hetserve.planning.magicbatch.options import (
    METHODS,
    Assignment,
    EdgeStream,
    Option,
    batch_choice,
    gpu_instances,
    stream_options,
)
from hetserve.planning.magicbatch.plans import (
    STREAM_COLUMNS,
    plan_streams,
    random_streams,
    read_streams,
)
from hetserve.planning.magicbatch.psoga import PsoGaParams, pso_ga
from hetserve.planning.magicbatch.shared import shared, total_power_w, utilisation

__all__ = [
    "METHODS", "STREAM_COLUMNS", "Assignment", "EdgeStream", "Option", "PsoGaParams",
    "assign", "batch_choice", "gpu_instances", "plan_streams", "pso_ga",
    "random_streams", "read_streams", "shared", "stream_options", "total_power_w",
    "utilisation",
]  # fmt: skip
