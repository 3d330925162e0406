"""Adapters that plug crawlq into crawlers. Each imports its crawler lazily.

- ``crawlq.contrib.scrapy``: crawlq as Scrapy's ``SCHEDULER``, and disk
  queues for Scrapy's own scheduler (needs ``pip install 'crawlq[scrapy]'``).
- ``crawlq.contrib.crawlee``: crawlq as a crawlee-python request manager,
  pacing every host for every worker (needs ``pip install 'crawlq[crawlee]'``).
"""
