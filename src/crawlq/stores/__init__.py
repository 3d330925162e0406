"""Backends behind a frontier: one module per store, one protocol in `base`."""
