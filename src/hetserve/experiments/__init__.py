"""Sweeps, load-factor search, reports and plots."""
