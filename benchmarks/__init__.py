"""crawlq benchmarks against its peers: ``python -m benchmarks`` (see README.md)."""
