"""Tests of the crawlee adapter (``crawlq.contrib.crawlee``)."""
