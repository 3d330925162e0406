"""Run ONE measurement in this (fresh) process and print its result as JSON.

``run.py`` starts this script once per measurement and repeat; it can also be
run by hand to profile one measurement::

    python benchmarks/measure.py '{"workload": "W1", "impl": "crawlq",
        "params": {"enqueue": "add", "dequeue": "pop+ack"}, "quick": true}'

The result is printed on the last line of stdout, after ``RESULT_MARKER``.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from typing import Any

import workloads
from peers import ADAPTERS, canonicalizer

RESULT_MARKER = "@@RESULT@@ "


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    sizes = workloads.sizes_for(bool(spec.get("quick")))
    workload: str = spec["workload"]
    impl: str = spec["impl"]
    params: dict[str, Any] = dict(spec.get("params") or {})

    if workload == "C1":
        data = workloads.w1_data(sizes.w1_unique, sizes.w1_hosts, sizes.w1_duplicate_every)
        urls = data.urls
        canonical = canonicalizer(impl)
        gc.collect()
        start = time.perf_counter()
        for url in urls:
            canonical(url)
        elapsed = time.perf_counter() - start
        result: dict[str, Any] = {"urls_rate": len(urls) / elapsed, "ok": True}
        if impl == "crawlq":
            # Not timed: how often the two canonical forms differ (informative).
            w3lib = canonicalizer("w3lib")
            result["differs_from_w3lib"] = sum(canonical(u) != w3lib(u) for u in set(urls))
        return result

    adapter = ADAPTERS[impl]()
    if workload == "W1":
        data = workloads.w1_data(sizes.w1_unique, sizes.w1_hosts, sizes.w1_duplicate_every)
        return dict(adapter.queue_run(data, params))
    if workload == "W2":
        plan = workloads.w2_plan(sizes.w2_seeds, sizes.w2_steps, sizes.w2_hosts)
        return dict(adapter.w2(plan, params))
    if workload == "W3":
        return dict(adapter.w3(sizes.w3_unique))
    if workload == "W5":
        data = workloads.w5_data(sizes.w5_requests, int(params["hosts"]))
        params.setdefault("budget_s", sizes.w5_budget_s)
        return dict(adapter.queue_run(data, params))
    raise ValueError(f"unknown workload {workload!r}")


def main() -> None:
    spec = json.loads(sys.argv[1])
    result = measure(spec)
    sys.stdout.write("\n" + RESULT_MARKER + json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
