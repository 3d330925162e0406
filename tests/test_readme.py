"""Every code sample in README.md and docs/ runs, and the CLI synopsis lists every option.

Python blocks are run in a fresh directory, section by section (a section is
``FILE: heading``, the nearest ``##`` heading or else the page's title). A line that is
an expression followed by a comment starting with a Python literal
(``frontier.add(r)  # True``, ``... # [False, True]: ...``) is checked: the
expression must equal the literal. Blocks that name places that do not exist
here (``/var/crawls``, ``redis://...@host``) run with those swapped for a
temporary path and the test redis-server. The asyncio block is an excerpt of
``examples/crawl.py``, which tests/test_example_crawl.py runs: it must appear
there word for word.
"""

from __future__ import annotations

import ast
import asyncio
import http.server
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main

import crawlq
from crawlq.cli import app

ROOT = Path(__file__).parent.parent
#: The README, then every page of the documentation site.
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
EXAMPLE = (ROOT / "examples" / "crawl.py").read_text()


def blocks(language: str) -> list[tuple[str, str]]:
    """``("FILE: section", code)`` of every fenced block in ``language``, in order."""
    found = []
    for page in PAGES:
        name = page.relative_to(ROOT).as_posix()
        section = ""
        lines = iter(page.read_text().splitlines())
        for line in lines:
            if line.startswith("# ") and not section:
                section = line[2:].strip()
            elif line.startswith("## "):
                section = line[3:].strip()
            elif line.startswith("```"):
                code = []
                for inner in lines:
                    if inner.strip() == "```":
                        break
                    code.append(inner)
                if line[3:].strip() == language:
                    found.append((f"{name}: {section}", "\n".join(code) + "\n"))
    return found


PYTHON = blocks("python")


def checked(code: str) -> tuple[str, int]:
    """``code`` with each ``expression  # literal`` line turned into a recorded check."""
    out = []
    checks = 0
    for line in code.splitlines():
        match = re.match(r"^(\s*)(\S.*?)\s+#\s*(.+)$", line)
        if match:
            indent, expression, comment = match.groups()
            literal = re.split(r":\s", comment, maxsplit=1)[0].strip()
            try:
                expected = ast.literal_eval(literal)
                ast.parse(expression, mode="eval")
            except (ValueError, SyntaxError):
                pass
            else:
                # Recorded, not asserted: an ``except Exception`` around it
                # in the sample must not swallow the check.
                out.append(f"{indent}__check__({expression!r}, ({expression}), {expected!r})")
                checks += 1
                continue
        out.append(line)
    return "\n".join(out) + "\n", checks


@pytest.fixture
def in_tmp(tmp_path: Path) -> Iterator[Path]:
    before = Path.cwd()
    os.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        os.chdir(before)


def run(code: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """Run ``code``; every frontier it opened is closed afterwards."""
    opened: list[crawlq.Frontier] = []
    real = crawlq.open_frontier

    def open_frontier(*args: object, **options: object) -> crawlq.Frontier:
        frontier = real(*args, **options)  # type: ignore[arg-type]
        opened.append(frontier)
        return frontier

    mismatches: list[str] = []
    ran: list[str] = []

    def check(expression: str, value: object, expected: object) -> None:
        ran.append(expression)
        if value != expected:
            mismatches.append(f"{expression} is {value!r}, not {expected!r}")

    monkeypatch.setattr(crawlq, "open_frontier", open_frontier)
    namespace: dict[str, object] = {"__name__": "readme", "__check__": check}
    try:
        exec(compile(code, "README.md", "exec"), namespace)
    finally:
        for frontier in opened:
            frontier.close()
        monkeypatch.undo()
    assert mismatches == []
    assert len(ran) == code.count("__check__(")
    return namespace


def test_every_python_block_is_covered() -> None:
    sections = [section for section, _ in PYTHON]
    assert sections == [
        "README.md: A short tour",
        "README.md: A short tour",
        "docs/asyncio.md: asyncio",
        "docs/controls.md: Block a host",
        "docs/controls.md: A host's own policy",
        "docs/controls.md: At most N requests per host",
        "docs/controls.md: Crawl again after a while",
        "docs/controls.md: React to a 429 in an asyncio crawler",
        "docs/crawlee.md: Use",
        "docs/crawlee.md: What is durable",
        "docs/getting-started.md: A 20-line crawler",
        "docs/retries.md: Not before",
        "docs/retries.md: Retry with backoff",
        "docs/retries.md: Refetch after done",
        "docs/retries.md: Adaptive revisits",
        "docs/scrapy.md: Scrapy",
        "docs/stores.md: Durable jobs (SQLite)",
        "docs/stores.md: Redis: many crawler processes, one frontier",
        "docs/stores.md: Redis Cluster: one crawl over many primaries",
        "docs/watching.md: Counters",
    ], "a new section has Python code: run it in this file"


def test_the_frontier_block_runs_and_its_results_hold(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code = next(code for section, code in PYTHON if section == "README.md: A short tour")
    code, checks = checked(code)
    assert checks >= 6
    namespace = run(code, monkeypatch)
    assert isinstance(namespace["frontier"], crawlq.Frontier)
    assert namespace["frontier"].closed


def test_the_durable_jobs_block_runs(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (code,) = [code for section, code in PYTHON if section.endswith("Durable jobs (SQLite)")]
    assert "sqlite:////var/crawls/shop.db" in code
    code = code.replace("sqlite:////var/crawls/", f"sqlite:///{in_tmp}/var-crawls-")
    run(f"import crawlq\n{code}", monkeypatch)
    assert (in_tmp / "crawls" / "shop-1" / "crawlq.db").exists()
    assert (in_tmp / "crawls" / "shop-1.db").exists()
    assert (in_tmp / "var-crawls-shop.db").exists()


def test_the_redis_block_runs_against_a_real_server(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    (code,) = [
        code
        for section, code in PYTHON
        if section.endswith(": Redis: many crawler processes, one frontier")
    ]
    assert "redis://user:pass@host:6379/0?crawl=shop" in code
    code = code.replace("redis://user:pass@host:6379/0", redis_url)
    namespace = run(f"import crawlq\n{code}", monkeypatch)
    assert isinstance(namespace["frontier"], crawlq.Frontier)


def test_the_redis_cluster_block_runs_against_a_real_cluster(
    redis_cluster_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    (code,) = [
        code
        for section, code in PYTHON
        if section.endswith(": Redis Cluster: one crawl over many primaries")
    ]
    seeds = "redis+cluster://user:pass@10.0.0.1:7000,10.0.0.2:7000/"
    assert seeds + "?crawl=shop" in code
    code = code.replace(seeds, redis_cluster_url).replace("crawl=shop", "crawl=docs-shop")
    namespace = run(f"import crawlq\n{code}", monkeypatch)
    assert isinstance(namespace["frontier"], crawlq.Frontier)
    with crawlq.open_frontier(f"{redis_cluster_url}?crawl=docs-shop") as again:
        assert again.stats().extra["shards"] == 16  # the default


def test_the_scrapy_block_names_the_scheduler(monkeypatch: pytest.MonkeyPatch) -> None:
    codes = [code for section, code in PYTHON if "SCHEDULER =" in code]
    assert [section for section, code in PYTHON if "SCHEDULER =" in code] == [
        "README.md: A short tour",
        "docs/scrapy.md: Scrapy",
    ]
    for code in codes:
        namespace = run(code, monkeypatch)
        module, _, name = str(namespace["SCHEDULER"]).rpartition(".")
        assert getattr(__import__(module, fromlist=[name]), name) is not None


def test_the_asyncio_block_is_the_example_file_word_for_word() -> None:
    (code,) = [code for section, code in PYTHON if section == "docs/asyncio.md: asyncio"]
    assert "async def crawl(" in code
    assert code in EXAMPLE


def test_the_crawlee_block_is_the_example_file_word_for_word() -> None:
    """The page's code is the example's crawl, which tests/crawlee/test_example.py runs."""
    (code,) = [code for section, code in PYTHON if section == "docs/crawlee.md: Use"]
    assert "RequestManager.open(" in code and "request_manager=manager" in code
    assert code in (ROOT / "examples" / "crawlee_crawl.py").read_text()


def test_the_crawlee_redis_block_opens_a_manager_on_a_real_server(redis_url: str) -> None:
    pytest.importorskip("crawlee", reason="pip install 'crawlq[crawlee]'")
    (code,) = [code for section, code in PYTHON if section == "docs/crawlee.md: What is durable"]
    assert "redis://127.0.0.1:6379/0?crawl=shop&socket_timeout=2" in code
    code = code.replace("redis://127.0.0.1:6379/0?crawl=shop", f"{redis_url}?crawl=docs-crawlee")
    body = "".join(f"    {line}\n" for line in code.splitlines())
    source = (
        "from crawlq.contrib.crawlee import RequestManager\n"
        f"async def main():\n{body}"
        "    try:\n"
        "        return manager._frontier.policy.lease_timeout, manager._frontier.url\n"
        "    finally:\n"
        "        await manager.close()\n"
    )
    namespace: dict[str, Any] = {}
    exec(compile(source, "docs/crawlee.md", "exec"), namespace)
    lease_timeout, url = asyncio.run(namespace["main"]())
    assert lease_timeout == 120 and "crawl=docs-crawlee" in url


def test_the_cli_synopsis_lists_every_command_and_option() -> None:
    (synopsis,) = [
        code for section, code in blocks("") if section == "docs/operations.md: Command line"
    ]
    group = typer.main.get_command(app)
    listed: dict[str, set[str]] = {}
    for line in synopsis.splitlines():
        words = line.split("#")[0].split()
        if len(words) >= 2 and words[0] == "crawlq" and not words[1].startswith("-"):
            listed[words[1]] = {w.strip("[]|.") for w in words[2:] if w.strip("[").startswith("--")}
    commands = group.commands  # type: ignore[attr-defined]
    assert set(listed) == set(commands)
    for name, command in commands.items():
        options = {
            opt
            for param in command.params
            for opt in (*param.opts, *param.secondary_opts)
            if opt.startswith("--")
        }
        assert listed[name] == options, name


def test_the_20_line_crawler_crawls_a_local_site(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run against a small site on 127.0.0.1: every page once, a broken link
    logged and done, links elsewhere left out; run again, nothing more."""
    (code,) = [code for section, code in PYTHON if section.endswith("A 20-line crawler")]
    assert len(code.strip().splitlines()) <= 35
    site = in_tmp / "site"
    site.mkdir()
    pages = {
        "index.html": '<a href="a.html">a</a> <a href="b.html">b</a> <a href="mailto:x@y">m</a>',
        "a.html": '<a href="b.html">b</a> <a href="c.html">c</a> <a href="https://elsewhere.test/">x</a>',
        "b.html": '<a href="index.html">home</a> <a href="missing.html">gone</a>',
        "c.html": "no links",
    }
    for name, html in pages.items():
        (site / name).write_text(html)
    served: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(site), **kwargs)

        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            served.append(self.path)  # once per request, whatever its status

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        start = f"http://127.0.0.1:{server.server_port}/index.html"
        code = code.replace('"https://example.com/"', repr(start))
        code = code.replace("host_delay=0.5", "host_delay=0.01")
        run(code, monkeypatch)
        assert sorted(served) == sorted(f"/{name}" for name in [*pages, "missing.html"])
        served.clear()
        run(code, monkeypatch)  # resumes a finished job: nothing to fetch
        assert served == []
    finally:
        server.shutdown()
        thread.join(5)
    assert (in_tmp / "crawls" / "example" / "crawlq.db").exists()


def test_the_control_blocks_run_and_their_results_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    sections = ["Block a host", "A host's own policy", "At most N", "Crawl again after"]
    for wanted in sections:
        (code,) = [code for section, code in PYTHON if f"docs/controls.md: {wanted}" in section]
        code, checks = checked(code)
        assert checks >= 1, wanted
        run(code, monkeypatch)


@pytest.mark.parametrize(
    "wanted", ["Not before", "Retry with backoff", "Refetch after done", "Adaptive revisits"]
)
def test_the_retries_blocks_run_and_their_results_hold(
    wanted: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    (code,) = [code for section, code in PYTHON if section == f"docs/retries.md: {wanted}"]
    code, checks = checked(code)
    assert checks >= 3
    run(code, monkeypatch)


def test_the_429_block_waits_out_retry_after_against_a_local_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The server answers the first request of /2 with 429 and Retry-After: 1."""
    (code,) = [
        code for section, code in PYTHON if section.endswith("React to a 429 in an asyncio crawler")
    ]
    hits: list[tuple[float, str]] = []
    refused: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append((time.monotonic(), self.path))
            status = 200
            if self.path == "/2" and not refused:
                refused.append(self.path)
                status = 429
            self.send_response(status)
            if status == 429:
                self.send_header("Retry-After", "1")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        assert '"http://shop.example/' in code
        code = code.replace("http://shop.example", f"http://127.0.0.1:{server.server_port}")
        namespace = run(code, monkeypatch)
    finally:
        server.shutdown()
        thread.join(5)
    assert sorted(str(url).rsplit("/", 1)[1] for url in namespace["fetched"]) == list("01234")
    first, again = [at for at, path in hits if path == "/2"]
    assert again - first >= 0.95  # put back, and handed out after the block
    assert sorted(path for _, path in hits) == ["/0", "/1", "/2", "/2", "/3", "/4"]


def test_the_middleware_snippet_names_a_real_middleware() -> None:
    (code,) = [code for section, code in blocks("py") if section.startswith("docs/controls.md")]
    namespace: dict[str, Any] = {}
    exec(code, namespace)
    for path in namespace["DOWNLOADER_MIDDLEWARES"]:
        module, _, name = path.rpartition(".")
        assert getattr(__import__(module, fromlist=[name]), name) is not None


def test_the_counters_block_runs_and_its_results_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    (code,) = [code for section, code in PYTHON if section == "docs/watching.md: Counters"]
    code, checks = checked(code)
    assert checks == 5
    run(code, monkeypatch)
