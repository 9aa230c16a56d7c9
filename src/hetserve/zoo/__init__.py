"""PyTorch model zoo (random weights, no downloads), split into executable layers.

Needs the ``torch`` extra. Planning and simulation use the exported graphs shipped as
package data instead (:mod:`hetserve.core.graph`).
"""
