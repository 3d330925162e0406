"""crawlq inspect and crawlq purge on a Redis frontier, through the CLI."""

from __future__ import annotations

from typer.testing import CliRunner

import crawlq
from crawlq.cli import app

runner = CliRunner()


def _crawl(redis_url: str, name: str) -> str:
    url = f"{redis_url}?crawl={name}"
    with crawlq.open_frontier(url) as frontier:
        frontier.add_many(
            [crawlq.Request(f"https://h{i % 3}.example/{i}", priority=i % 2) for i in range(9)]
        )
    return url


def test_inspect_shows_counts_hosts_and_priorities(redis_url: str) -> None:
    url = _crawl(redis_url, "cli-inspect")
    with crawlq.open_frontier(url) as frontier:
        assert frontier.pop() is not None
        result = runner.invoke(app, ["inspect", url])
        assert result.exit_code == 0, result.output
    assert "cli-inspect" in result.output
    for host in ("h0.example", "h1.example", "h2.example"):
        assert host in result.output
    lines = {line.strip() for line in result.output.splitlines()}
    assert any(line.startswith("│ queued") and line.rstrip("│ ").endswith("8") for line in lines)
    assert any("leased" in line and line.rstrip("│ ").endswith("1") for line in lines)


def test_purge_asks_first_and_deletes_only_that_crawl(redis_url: str) -> None:
    doomed = _crawl(redis_url, "cli-doomed")
    kept = _crawl(redis_url, "cli-kept")
    refused = runner.invoke(app, ["purge", doomed], input="n\n")
    assert refused.exit_code == 1
    assert "nothing was deleted" in refused.output
    with crawlq.open_frontier(doomed) as frontier:
        assert len(frontier) == 9
    done = runner.invoke(app, ["purge", doomed, "--yes"])
    assert done.exit_code == 0, done.output
    assert "deleted" in done.output
    with crawlq.open_frontier(doomed) as frontier:
        assert len(frontier) == 0
        assert frontier.stats().seen == 0
    with crawlq.open_frontier(kept) as frontier:
        assert len(frontier) == 9


def test_purge_hides_the_password_and_refuses_other_stores(
    redis_url: str, tmp_path: object
) -> None:
    url = redis_url.replace("redis://", "redis://user:s3cret@") + "?crawl=x"
    result = runner.invoke(app, ["purge", url, "--yes"])
    assert "s3cret" not in result.output
    assert result.exit_code == 1
    other = runner.invoke(app, ["purge", "sqlite:///job.db", "--yes"])
    assert other.exit_code == 1
    assert "delete the job directory" in other.output


async def test_waiting_get_sees_another_workers_add(redis_url: str) -> None:
    """A get() waiting on an empty shared frontier wakes up for an add made elsewhere."""
    import asyncio

    url = f"{redis_url}?crawl=scheduler-poll"
    with crawlq.open_frontier(url) as mine, crawlq.open_frontier(url) as theirs:
        async with crawlq.Scheduler(mine) as scheduler:
            getter = asyncio.create_task(scheduler.get())
            await asyncio.sleep(0.1)
            assert not getter.done()
            theirs.add(crawlq.Request("https://elsewhere.example/"))
            request = await asyncio.wait_for(getter, 3)
            assert request.url == "https://elsewhere.example/"
            scheduler.task_done(request)


def test_inspect_of_a_crawl_that_does_not_exist_fails(redis_url: str) -> None:
    result = runner.invoke(app, ["inspect", f"{redis_url}?crawl=never-made"])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: no crawl named 'never-made' exists on ")
    assert "Counts" not in result.stdout


def test_a_url_without_a_crawl_name_is_said_to_mean_default(redis_url: str) -> None:
    with crawlq.open_frontier(redis_url) as frontier:
        frontier.add(crawlq.Request("https://a.example/"))
    result = runner.invoke(app, ["inspect", redis_url])
    assert result.exit_code == 0, result.output
    assert "no ?crawl=NAME, so it means the crawl named 'default'" in result.stderr
    assert runner.invoke(app, ["purge", "--yes", redis_url]).exit_code == 0


def test_hosts_lists_and_changes_a_running_crawl(redis_url: str) -> None:
    url = _crawl(redis_url, "cli-hosts")
    with crawlq.open_frontier(url, host_delay=0.0) as worker:
        first = worker.pop()
        assert first is not None
        result = runner.invoke(app, ["hosts", url, "--block", "h1.example", "30"])
        assert result.exit_code == 0, result.output
        assert "changed h1.example" in result.output
        result = runner.invoke(app, ["hosts", url, "--delay", "h2.example", "5"])
        assert result.exit_code == 0, result.output
        lines = {
            line.split("│")[1].strip(): line for line in result.output.splitlines() if "│" in line
        }
        assert "30" in lines["h1.example"] or "29." in lines["h1.example"]
        assert "5 s" in lines["h2.example"]
        # The running worker obeys both from its next call.
        assert worker.host_policy("h2.example") == crawlq.HostPolicy(5.0, None)
        worker.ack(first)
        popped = [r.url for r in iter(worker.pop, None)]
        assert not [u for u in popped if "//h1." in u]
        assert len([u for u in popped if "//h2." in u]) == 1  # then its own 5 s delay
        result = runner.invoke(app, ["hosts", url, "--unblock", "h1.example"])
        assert result.exit_code == 0, result.output
        assert [r for r in iter(worker.pop, None) if "//h1." in r.url]


def test_hosts_of_a_missing_crawl_or_an_unreachable_server_fail_cleanly(redis_url: str) -> None:
    result = runner.invoke(app, ["hosts", f"{redis_url}?crawl=nothing-here", "--block", "a", "1"])
    assert result.exit_code == 1
    assert "there is no crawl 'nothing-here'" in result.stderr
    result = runner.invoke(app, ["hosts", "redis://127.0.0.1:1/0?crawl=x"])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: ")
