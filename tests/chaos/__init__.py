"""Chaos runs: crawler processes under injected faults, checked by their own logs."""
