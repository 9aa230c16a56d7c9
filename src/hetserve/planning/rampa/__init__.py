"""RAMPA (TCC 2025): partitioning and placing pipelined services in a switched cluster.

Built so far (issue 16, in progress): the cluster view and allocation costs
(:mod:`.network`, Eqs. 4-5) and the performance model (:mod:`.perf`, Eqs. 1-3).
"""
