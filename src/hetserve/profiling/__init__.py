"""Measuring the zoo's models: per-block latency (and energy) profile sets."""
