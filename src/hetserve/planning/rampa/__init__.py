"""RAMPA (TCC 2025): partitioning and placing pipelined services in a switched cluster.

Built so far (issue 16, in progress): the cluster view and allocation costs
(:mod:`.network`, Eqs. 4-5), the performance model (:mod:`.perf`, Eqs. 1-3), the cluster
state and requirement check (:mod:`.state`), the ant colony with RAMPA, NCAR and PE
(:mod:`.aco`), the exact optimum on small clusters (:mod:`.exact`) and placing request
sequences (:mod:`.place`, ``hetserve place``); serving placements in the simulator is
:mod:`hetserve.experiments.rampa.validate`.
"""
