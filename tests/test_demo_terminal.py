"""`crawlq demo` stopped and resumed as a person does it: Ctrl-C in a real terminal (tmux).

Also the two speeds of stopping in `run_demo`, and totals after a ``kill -9``:
whatever the stop, the counts the demo prints agree with the server's own log.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from crawlq.cli.demo import DemoConfig, DemoProgress, run_demo

from ._terminal import Tmux
from .test_demo import demo_process, fetch_log, wait_for_fetches


def row(summary: str, label: str) -> int:
    """The number in the summary table's row ``label``."""
    found = re.search(rf"{re.escape(label)}\s*│\s*([\d,]+)", summary)
    assert found is not None, summary
    return int(found.group(1).replace(",", ""))


async def test_a_stop_lets_the_requests_in_flight_finish(tmp_path: Path) -> None:
    config = DemoConfig(pages=300, hosts=10, delay=0.01, latency=0.05, workers=16, seed=4)
    stop = asyncio.Event()

    def stop_early(snapshot: DemoProgress) -> None:
        if snapshot.fetched >= 40:
            stop.set()

    first = await run_demo(
        config, job=tmp_path, stop=stop, on_progress=stop_early, progress_interval=0.01
    )
    assert first.interrupted
    assert first.in_flight_at_stop == 0  # each one in flight finished and was acked
    log = fetch_log(tmp_path)
    # The job's durable count, the result and the server's log agree exactly.
    assert first.fetched == first.server_urls == len(log) == sum(log.values())
    second = await run_demo(config, job=tmp_path)
    assert second.complete and second.refetches == 0


async def test_a_second_stop_puts_the_requests_in_flight_back(tmp_path: Path) -> None:
    # Slow pages, so that requests are in flight when the second stop comes.
    config = DemoConfig(pages=200, hosts=10, delay=0.0, latency=2.0, workers=16, seed=4)
    stop, stop_now = asyncio.Event(), asyncio.Event()

    def stop_twice(snapshot: DemoProgress) -> None:
        # Once the server has seen requests the job has not finished yet.
        if snapshot.in_flight >= 5 and sum(fetch_log(tmp_path).values()) > snapshot.fetched:
            stop.set()
            stop_now.set()

    first = await run_demo(
        config,
        job=tmp_path,
        stop=stop,
        stop_now=stop_now,
        on_progress=stop_twice,
        progress_interval=0.01,
    )
    assert first.interrupted
    # They were put back unfinished, not waited for.
    assert first.in_flight_at_stop >= 1
    assert first.fetched < first.server_urls  # served, but not done in the job
    assert first.queued > 0


def test_totals_after_kill_9_agree_with_the_server_log(tmp_path: Path) -> None:
    job = tmp_path / "job"
    process = demo_process(job)
    wait_for_fetches(job, process, 150)
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=60)
    again = demo_process(job, "--fast")
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0, (out, err)
    log = fetch_log(job)
    assert row(out, "Pages fetched") == row(out, "Server's log") == len(log)
    assert f"{sum(log.values()):,} fetches in all" in out
    assert row(out, "Re-fetched after resume") == sum(n - 1 for n in log.values())


# -- in a real terminal ------------------------------------------------------------


def test_ctrl_c_in_a_terminal_then_resume(tmp_path: Path, tmux: Tmux) -> None:
    job = tmp_path / "job"
    demo = (
        f"cd {tmp_path} && {sys.executable} -c 'from crawlq.cli import main; main()' "
        f"demo --pages 600 --hosts 10 --job {job}"
    )
    # The pane stays after the demo exits, showing its exit code.
    tmux.start("first", f"{demo}; echo exit=$?; sleep 600")
    tmux.wait_for("press Ctrl-C to stop", 60)
    time.sleep(2)  # let it run a little, as a person watching it would
    deadline = time.monotonic() + 60
    while sum(fetch_log(job).values()) < 30:  # a few seconds at the default pace
        assert time.monotonic() < deadline, tmux.screen()
        time.sleep(0.1)
    tmux.run("send-keys", "-t", "first", "C-c")
    # rich wraps long lines at the terminal's width: compare text, not lines.
    screen = " ".join(tmux.wait_for("exit=", 60).split())
    assert "stopping: letting the requests in flight finish" in screen
    assert "exit=130" in screen
    assert "Traceback" not in screen
    assert "WARNING" not in screen and "every task that took requests" not in screen
    log = fetch_log(job)
    stopped = re.search(r"stopped: ([\d,]+) of ([\d,]+) fetched", screen)
    assert stopped is not None, screen
    # What the demo says it fetched is what the server logged: nothing was
    # dropped in flight, nothing will be fetched twice.
    assert int(stopped.group(1).replace(",", "")) == len(log) == sum(log.values())
    assert f"the server's log: {len(log):,} URLs" in screen
    assert "run the same command to resume" in screen

    tmux.start("again", f"{demo} --fast; echo exit=$?; sleep 600")
    screen = tmux.wait_for("exit=", 120)
    assert "exit=0" in screen, screen
    assert "(resumed)" in screen
    log = fetch_log(job)
    assert row(screen, "Pages fetched") == row(screen, "Server's log") == len(log)
    text = " ".join(screen.split())
    assert f"{len(log):,} fetches in all" in text  # nothing fetched twice
    assert "fetched exactly once, over 2 runs" in text


# -- the first ./scripts/demo ------------------------------------------------------


def test_the_first_run_of_the_scripts_says_it_is_building_the_venv(tmp_path: Path) -> None:
    root = Path(__file__).parent.parent
    # A stand-in for python3 whose venv and pip do nothing, so that only the
    # script's own messages are exercised (the real install is what CI runs).
    fake = tmp_path / "python3"
    fake.write_text(
        "#!/bin/sh\n"
        'if [ "$1 $2" = "-m venv" ]; then mkdir -p "$3/bin"; cp "$0" "$3/bin/python"; fi\n'
        "exit 0\n"
    )
    fake.chmod(0o755)
    work = tmp_path / "checkout"
    (work / "scripts").mkdir(parents=True)
    shutil.copy(root / "scripts" / "_venv.sh", work / "scripts" / "_venv.sh")
    (work / "pyproject.toml").write_text("")
    command = ["bash", "-c", "source scripts/_venv.sh && echo sourced"]
    env = {**os.environ, "PYTHON": str(fake)}
    first = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stderr
    assert first.stderr.startswith("first run: making a virtualenv in .venv")
    assert ".venv is ready" in first.stderr
    again = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=60)
    assert (again.returncode, again.stdout, again.stderr) == (0, "sourced\n", "")
