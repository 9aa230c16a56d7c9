"""hetserve: DNN inference serving on heterogeneous GPU clusters under latency SLOs."""

__version__ = "0.1.0"
