"""`crawlq inspect`, `export` and `import`: numbers, round trips, bad input, locks."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import crawlq
from crawlq._exchange import decode_line, encode_line
from crawlq.cli import app

runner = CliRunner()


def crawlq_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the CLI in a fresh process (so that job locks are really another process's)."""
    code = "import sys; from crawlq.cli import main; sys.argv[0] = 'crawlq'; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def row(output: str, label: str) -> list[str]:
    """The cells of the rich table row that starts with ``label``."""
    for line in output.splitlines():
        cells = [cell.strip() for cell in re.split(r"[│┃]", line)[1:-1]]
        if cells and cells[0] == label:
            return cells
    raise AssertionError(f"no row {label!r} in:\n{output}")


def everything(job: Path) -> list[crawlq.Request]:
    """Pop every request of a job, in the frontier's order (and put them back)."""
    with crawlq.open_frontier(str(job)) as frontier:
        popped = []
        while (request := frontier.pop()) is not None:
            popped.append(request)
        for request in popped:
            frontier.release(request)
        return popped


def rich_requests() -> list[crawlq.Request]:
    """Requests that use every field, and the awkward meta values."""
    return [
        crawlq.Request("https://a.example/"),
        crawlq.Request(
            "https://a.example/form",
            method="POST",
            headers={"Content-Type": "application/x-www-form-urlencoded", "X-Ünï": "çödé"},
            body=b"q=1&\xff\x00raw",
            priority=7,
            meta={
                "raw": b"\x00\x01\xfe",
                "nested": {"list": [1, 2.5, None, True, b"x"], "deep": {"b": b""}},
                "inf": math.inf,
                "neg": -math.inf,
                "looks_tagged": {"$bytes": "not really bytes"},
                "also": {"$dict": {"k": 1}},
                "text": "line\nbreak \u2028 sep",
                "download_slot": "slot-1",
            },
            callback="parse_form",
            errback="on_error",
            dont_filter=True,
            depth=3,
        ),
        crawlq.Request("https://b.example/page?x=1", priority=-5, depth=1),
        crawlq.Request("https://b.example/page?x=1", priority=-5, dont_filter=True),
        crawlq.Request("http://c.example:8080/ünicode path", priority=2**31 - 1),
    ]


# -- the JSONL format ---------------------------------------------------------------


def test_lines_leave_defaults_out_and_round_trip() -> None:
    assert encode_line(crawlq.Request("https://a.example/")) == '{"url":"https://a.example/"}'
    for request in rich_requests():
        assert decode_line(encode_line(request)) == request
    nan = decode_line(encode_line(crawlq.Request("https://a.example/", meta={"x": math.nan})))
    assert math.isnan(nan.meta["x"])
    line = json.loads(encode_line(rich_requests()[1]))
    assert line["body_base64"] == "cT0xJv8AcmF3"
    assert line["meta"]["raw"] == {"$bytes": "AAH+"}
    assert line["meta"]["looks_tagged"] == {"$dict": {"$bytes": "not really bytes"}}


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("{", "not valid JSON"),
        ("[1]", "must be a JSON object, not an array"),
        ('{"priority": 1}', "'url' key is missing"),
        ('{"url": "https://a.example/", "prio": 1}', "unknown key 'prio'"),
        ('{"url": "mailto:x@y"}', "not an absolute http(s) URL"),
        ('{"url": "https://a.example/", "priority": 1.5}', "priority must be an int"),
        ('{"url": "https://a.example/", "priority": 4294967296}', "32-bit range"),
        ('{"url": "https://a.example/", "depth": -1}', "depth must be a non-negative int"),
        ('{"url": "https://a.example/", "dont_filter": 1}', "dont_filter must be true or false"),
        ('{"url": "https://a.example/", "headers": {"a": 1}}', "is not str to str"),
        ('{"url": "https://a.example/", "headers": []}', "headers must be an object"),
        ('{"url": "https://a.example/", "body_base64": "%%"}', "not valid base64"),
        ('{"url": "https://a.example/", "meta": []}', "meta must be an object"),
        ('{"url": "https://a.example/", "meta": {"a": {"$float": "big"}}}', '"$float"'),
        ('{"url": "https://a.example/", "meta": {"n": 18446744073709551616}}', "meta['n']"),
        ('{"url": "https://a.example/", "meta": {"download_slot": ""}}', "download_slot"),
        ('{"url": "https://a.example/", "callback": 3}', "callback must be"),
    ],
)
def test_bad_lines_are_invalid_requests(line: str, reason: str) -> None:
    with pytest.raises(crawlq.InvalidRequest, match=re.escape(reason)):
        decode_line(line)


def test_meta_without_a_json_form_cannot_be_exported() -> None:
    request = crawlq.Request("https://a.example/", meta={"when": {1: "int key"}})
    with pytest.raises(crawlq.SerializationError, match=r"meta\['when'\].*not a str"):
        encode_line(request)


# -- inspect --------------------------------------------------------------------


@pytest.fixture
def known_job(tmp_path: Path) -> Path:
    """A job with 9 stored requests over 3 hosts, 1 done, 1 duplicate refused."""
    job = tmp_path / "known"
    with crawlq.open_frontier(str(job), host_delay=300.0) as frontier:
        frontier.add_many(
            [crawlq.Request(f"https://a.example/{i}", priority=1 if i < 3 else 0) for i in range(6)]
        )
        frontier.add_many([crawlq.Request(f"https://b.example/{i}", priority=-2) for i in range(3)])
        frontier.add(crawlq.Request("https://c.example/", priority=5))
        assert not frontier.add(crawlq.Request("https://c.example/#again", priority=5))
        done = frontier.pop()
        assert done is not None and done.url == "https://c.example/"
        frontier.ack(done)  # c.example is now paced for 300 s
    return job


def test_inspect_shows_counts_hosts_priorities_and_settings(known_job: Path) -> None:
    result = runner.invoke(app, ["inspect", str(known_job)])
    assert result.exit_code == 0, result.output
    out = result.output
    assert row(out, "requests stored (queued + leased)")[1] == "9"
    assert row(out, "seen fingerprints")[1] == "10"
    assert row(out, "hosts with requests")[1] == "2"
    assert row(out, "hosts known")[1] == "3"
    assert row(out, "log entries not yet applied")[1] == "0"  # closed: flushed
    assert row(out, "a.example")[1:] == ["6", "ready"]
    assert row(out, "b.example")[1:] == ["3", "ready"]
    assert row(out, "1")[1:] == ["3", "33.3%"]
    assert row(out, "0")[1:] == ["3", "33.3%"]
    assert row(out, "-2")[1:] == ["3", "33.3%"]
    assert row(out, "lifo")[1] == "false"
    assert row(out, "schema version")[1].startswith("3")
    assert row(out, "written by")[1].startswith(f"crawlq {crawlq.__version__}")
    assert "mode crawlq; fragments dropped" in row(out, "fingerprint")[1]
    assert "leased requests are counted" in " ".join(out.split())


def test_inspect_shows_pacing_of_a_host(tmp_path: Path) -> None:
    job = tmp_path / "paced"
    with crawlq.open_frontier(str(job), host_delay=300.0) as frontier:
        frontier.add_many([crawlq.Request(f"https://a.example/{i}") for i in range(3)])
        request = frontier.pop()
        assert request is not None
        frontier.ack(request)
    result = runner.invoke(app, ["inspect", str(job), "--top", "1"])
    assert result.exit_code == 0, result.output
    _, count, pacing = row(result.output, "a.example")
    assert count == "2"
    match = re.fullmatch(r"ready in ([\d.]+)s", pacing)
    assert match is not None, pacing
    seconds = float(match.group(1))
    assert 250 < seconds <= 300


def test_export_of_a_redis_crawl_whose_server_is_down_fails_in_one_line() -> None:
    result = runner.invoke(app, ["export", "redis://127.0.0.1:1/0?crawl=x"])
    assert result.exit_code == 1 and result.stdout == ""
    assert "127.0.0.1:1" in result.stderr and "Traceback" not in result.stderr


# -- export and import --------------------------------------------------------------


def test_export_then_import_round_trips_every_field(tmp_path: Path) -> None:
    source, copy = tmp_path / "source", tmp_path / "copy"
    with crawlq.open_frontier(str(source)) as frontier:
        assert frontier.add_many(rich_requests()) == [True] * 5
    exported = runner.invoke(app, ["export", str(source)])
    assert exported.exit_code == 0, exported.output
    lines = exported.stdout.splitlines()
    assert [decode_line(line) for line in lines] == rich_requests()  # acceptance order
    dump = tmp_path / "dump.jsonl"
    dump.write_text(exported.stdout, encoding="utf-8")

    imported = runner.invoke(app, ["import", f"sqlite:///{copy}.db", str(dump)])
    assert imported.exit_code == 0, imported.output
    assert "5 added, 0 duplicates" in imported.stdout
    assert everything(Path(f"{copy}.db")) == everything(source)
    assert len(everything(source)) == 5
    again = runner.invoke(app, ["export", f"sqlite:///{copy}.db"])
    assert again.stdout == exported.stdout

    # Importing the same file again: the filtered requests are duplicates now.
    twice = runner.invoke(app, ["import", f"sqlite:///{copy}.db", "-"], input=exported.stdout)
    assert twice.exit_code == 0, twice.output
    assert "2 added, 3 duplicates" in twice.stdout  # the two dont_filter ones are added


def test_import_uses_the_jobs_own_fingerprint_settings(tmp_path: Path) -> None:
    job = tmp_path / "utm"
    fingerprinter = crawlq.Fingerprinter(ignore_query_params=["utm_*", "sid"])
    with crawlq.open_frontier(str(job), fingerprinter=fingerprinter, lifo=True) as frontier:
        frontier.add(crawlq.Request("https://a.example/?utm_source=x"))
    result = runner.invoke(
        app,
        ["import", str(job), "-"],
        input='{"url": "https://a.example/?sid=3"}\n{"url": "https://a.example/b"}\n',
    )
    assert result.exit_code == 0, result.output
    assert "1 added, 1 duplicates" in result.stdout


def test_import_with_bad_lines_imports_nothing(tmp_path: Path) -> None:
    job = tmp_path / "job"
    with crawlq.open_frontier(str(job)) as frontier:
        frontier.add(crawlq.Request("https://kept.example/"))
    before = runner.invoke(app, ["export", str(job)]).stdout
    text = "\n".join(
        [
            '{"url": "https://new.example/1"}',
            "",
            '{"url": "https://new.example/2", "priority": "high"}',
            '{"url": "https://new.example/3"}',
            "{not json",
            '{"url": "https://new.example:port/"}',
        ]
    )
    result = runner.invoke(app, ["import", str(job), "-"], input=text)
    assert result.exit_code == 1
    errors = result.stderr.splitlines()
    assert errors[0].startswith("line 3: priority must be an int")
    assert errors[1].startswith("line 5: not valid JSON")
    assert errors[2].startswith("line 6: ")
    assert errors[3] == "error: 3 of 5 lines are invalid; nothing was imported"
    assert "Traceback" not in result.output
    assert runner.invoke(app, ["export", str(job)]).stdout == before


def test_import_lists_at_most_twenty_bad_lines(tmp_path: Path) -> None:
    text = "\n".join(['{"url": "ftp://x.example/"}'] * 25)
    result = runner.invoke(app, ["import", str(tmp_path / "job"), "-"], input=text)
    assert result.exit_code == 1
    errors = result.stderr.splitlines()
    assert len(errors) == 22
    assert errors[19].startswith("line 20: ")
    assert errors[20] == "... and 5 more bad lines"
    assert errors[21] == "error: 25 of 25 lines are invalid; nothing was imported"
    assert not (tmp_path / "job").exists()


def test_import_into_a_job_in_use_fails_cleanly(tmp_path: Path) -> None:
    job = tmp_path / "busy"
    dump = tmp_path / "dump.jsonl"
    dump.write_text('{"url": "https://a.example/"}\n')
    with crawlq.open_frontier(str(job)) as frontier:
        result = crawlq_cli("import", str(job), str(dump))
        assert result.returncode == 1, result.stderr
        assert result.stderr.startswith("error: job ")
        assert f"is locked by pid {__import__('os').getpid()}" in result.stderr
        assert result.stderr.count("\n") == 1
        assert len(frontier) == 0


def test_export_and_inspect_work_while_a_crawl_has_the_job_open(tmp_path: Path) -> None:
    job = tmp_path / "live"
    with crawlq.open_frontier(str(job)) as frontier:
        frontier.add_many([crawlq.Request(f"https://a.example/{i}") for i in range(3)])
        leased = frontier.pop()
        assert leased is not None
        exported = crawlq_cli("export", str(job))
        assert exported.returncode == 0, exported.stderr
        assert [decode_line(line).url for line in exported.stdout.splitlines()] == [
            f"https://a.example/{i}" for i in range(3)
        ]  # the leased one too: it is not done
        inspected = crawlq_cli("inspect", str(job))
        assert inspected.returncode == 0, inspected.stderr
        assert row(inspected.stdout, "requests stored (queued + leased)")[1] == "3"
        assert row(inspected.stdout, "open by")[1] == f"pid {__import__('os').getpid()}"
        # The crawl goes on, and the next read sees what it committed.
        frontier.ack(leased)
        frontier.add(crawlq.Request("https://b.example/"))
        again = crawlq_cli("export", str(job))
        assert [decode_line(line).url for line in again.stdout.splitlines()] == [
            "https://a.example/1",
            "https://a.example/2",
            "https://b.example/",
        ]


@pytest.mark.parametrize("command", ["inspect", "export"])
def test_a_missing_job_is_a_clean_error(tmp_path: Path, command: str) -> None:
    result = crawlq_cli(command, str(tmp_path / "nothing"))
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == (
        f"error: there is no crawlq job at {tmp_path / 'nothing' / 'crawlq.db'}; "
        "give a job directory (holding crawlq.db) or its database file\n"
    )
    assert not (tmp_path / "nothing").exists()


def test_other_bad_jobs_and_files_are_clean_errors(tmp_path: Path) -> None:
    not_a_job = tmp_path / "notes.txt"
    not_a_job.write_text("hello")
    result = runner.invoke(app, ["inspect", str(not_a_job)])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: ") and "is not a crawlq job" in result.stderr
    result = runner.invoke(app, ["import", str(tmp_path / "job"), str(tmp_path / "missing")])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: cannot read ")
    result = runner.invoke(app, ["export", "memory://"])
    assert result.exit_code == 1
    assert "memory:// frontier lives inside its process" in result.stderr


# -- the first hour: import options, help text, closed and twice-opened jobs ----------


def test_import_creates_a_new_job_with_the_options_given(tmp_path: Path) -> None:
    job = tmp_path / "new"
    lines = '{"url": "https://a.example/?utm_source=x"}\n{"url": "https://a.example/"}\n'
    result = runner.invoke(
        app, ["import", str(job), "-", "--ignore-query-param", "utm_*", "--lifo"], input=lines
    )
    assert result.exit_code == 0, result.output
    assert "1 added, 1 duplicates" in result.stdout
    fingerprinter = crawlq.Fingerprinter(ignore_query_params=["utm_*"])
    with crawlq.open_frontier(str(job), fingerprinter=fingerprinter, lifo=True) as frontier:
        assert len(frontier) == 1
    # Options that disagree with an existing job are refused, and nothing is imported.
    result = runner.invoke(app, ["import", str(job), "-", "--keep-fragments"], input=lines)
    assert result.exit_code == 1
    assert result.stderr.startswith("error: ")
    with crawlq.open_frontier(str(job), fingerprinter=fingerprinter, lifo=True) as frontier:
        assert len(frontier) == 1


def test_help_shows_no_bool_placeholders_nor_private_modules() -> None:
    for command in ([], ["demo"], ["inspect"], ["export"], ["import"], ["purge"]):
        result = runner.invoke(app, [*command, "--help"])
        assert result.exit_code == 0, result.output
        assert "<bool>" not in result.output
        assert "crawlq._" not in result.output
    export_help = " ".join(runner.invoke(app, ["export", "--help"]).output.split())
    assert "queued and leased alike" in export_help
    assert "body_base64" in export_help


def test_opening_a_job_twice_in_one_process_says_so(tmp_path: Path) -> None:
    with crawlq.open_frontier(str(tmp_path / "job")):
        with pytest.raises(crawlq.JobLocked, match="already open in this process") as locked:
            crawlq.open_frontier(str(tmp_path / "job"))
        assert "close it first" in str(locked.value)


def test_a_closed_frontier_says_what_to_do() -> None:
    frontier = crawlq.open_frontier()
    frontier.close()
    with pytest.raises(crawlq.FrontierClosed, match=r"crawlq\.open_frontier\(\)"):
        frontier.add(crawlq.Request("https://a.example/"))
