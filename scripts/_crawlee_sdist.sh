#!/usr/bin/env bash
# Fetch crawlee's sdist once, for ./scripts/crawlee-suite (tests/crawlee/_suite.py).
#   scripts/_crawlee_sdist.sh [VERSION]   (default: the crawlee installed in .venv)
# Prints the cache directory, .venv/crawlee-sdist/VERSION, which holds:
#   crawlee-VERSION/  the unpacked sdist
#   site/             what the test files import that .venv lacks (put it on
#                     PYTHONPATH for the test run; empty when nothing is missing)
# Only crawlee is fetched as source (--no-binary crawlee): with :all: pip
# would also build crawlee's build backend (uv_build, Rust) from source.
# crawlee's sdists (uv_build) hold src/ only, no tests/ (1.11.0 does not):
# tests/crawlee/_suite.py then says so, and takes crawlee's tests from a
# checkout of crawlee's repository named by CRAWLEE_TESTS.
# Needs .venv (scripts/_venv.sh). Run again, it does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
installed=$("$py" -c 'import crawlee; print(crawlee.__version__)')
version=${1:-$installed}
cache=.venv/crawlee-sdist/$version
if [ ! -f "$cache/.done" ]; then
    rm -rf "$cache"
    mkdir -p "$cache/site"
    "$py" -m pip download --quiet --no-deps --no-binary crawlee -d "$cache" "crawlee==$version" >&2
    tar -xzf "$cache/crawlee-$version.tar.gz" -C "$cache"
    # The swapped test files import pytest, pytest-asyncio and crawlee, all in
    # .venv (the dev extra); crawlee's conftest.py files, which import its
    # HTTP clients, test server, proxy.py and fakeredis, are not loaded.
    missing=$("$py" - <<'PY'
import importlib.util

needed = {"pytest": "pytest", "pytest_asyncio": "pytest-asyncio", "pytest_timeout": "pytest-timeout"}
print(" ".join(dist for module, dist in needed.items() if importlib.util.find_spec(module) is None))
PY
    )
    if [ -n "$missing" ]; then
        # shellcheck disable=SC2086
        "$py" -m pip install --quiet --no-deps --target "$cache/site" $missing >&2
    fi
    touch "$cache/.done"
fi
echo "$PWD/$cache"
