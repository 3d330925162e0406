#!/usr/bin/env bash
# Fetch Scrapy's sdist (its test suite) once and the few packages its tests
# need, for tests/scrapy/test_scrapy_suite.py and scripts/scrapy-suite.
#   scripts/_scrapy_sdist.sh [VERSION]   (default: the Scrapy installed in .venv)
# Prints the cache directory, .venv/scrapy-sdist/VERSION, which holds:
#   scrapy-VERSION/  the unpacked sdist (its tests/ and conftest.py)
#   site/            the test requirements these tests import (pytest-twisted or
#                    testfixtures) and, when VERSION is not the installed one,
#                    Scrapy VERSION with the Twisted the scrapy extra gives it:
#                    put it first on PYTHONPATH.
# Needs .venv (scripts/_venv.sh). Run again, it does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
installed=$("$py" -c 'import scrapy; print(scrapy.__version__)')
version=${1:-$installed}
cache=.venv/scrapy-sdist/$version
if [ ! -f "$cache/.done" ]; then
    rm -rf "$cache"
    mkdir -p "$cache"
    "$py" -m pip download --quiet --no-binary :all: --no-deps -d "$cache" "scrapy==$version" >&2
    tar -xzf "$cache/scrapy-$version.tar.gz" -C "$cache"
    [ -d "$cache/scrapy-$version" ] || mv "$cache"/[Ss]crapy-"$version" "$cache/scrapy-$version"
    # Of the test requirements in its tox.ini, the ones these test files import:
    # pytest-twisted (2.14 and later run under it) and testfixtures (2.13).
    extra=()
    if grep -q '^ *pytest-twisted' "$cache/scrapy-$version/tox.ini"; then
        extra+=(pytest-twisted greenlet decorator)
    fi
    if grep -q '^ *testfixtures' "$cache/scrapy-$version/tox.ini"; then
        extra+=(testfixtures)
    fi
    if [ "$version" != "$installed" ]; then
        # Scrapy VERSION with the Twisted that `pip install 'crawlq[scrapy]'`
        # gives it: pip resolves, afresh, the extra's requirements in
        # pyproject.toml with Scrapy pinned to VERSION. (Scrapy 2.13.4 to 2.15
        # require Twisted<=25.5.0: their HTTP handler imports a name Twisted 26
        # dropped, as does that of 2.13.1-2.13.3, which allow Twisted 26.)
        twisted=$("$py" - "$version" <<'PY'
import json, re, subprocess, sys, tomllib

with open("pyproject.toml", "rb") as f:
    extra = tomllib.load(f)["project"]["optional-dependencies"]["scrapy"]
name = re.compile(r"[A-Za-z0-9._-]+")
requirements = [f"scrapy=={sys.argv[1]}"]
requirements += [r for r in extra if name.match(r).group().lower() != "scrapy"]
report = subprocess.run(
    [sys.executable, "-m", "pip", "install", "--quiet", "--dry-run", "--ignore-installed",
     "--report", "-", *requirements],
    check=True, stdout=subprocess.PIPE, text=True,
).stdout
print(next(item["metadata"]["version"] for item in json.loads(report)["install"]
           if item["metadata"]["name"].lower() == "twisted"))
PY
        )
        extra+=("scrapy==$version" "Twisted==$twisted")
    fi
    "$py" -m pip install --quiet --no-deps --target "$cache/site" "${extra[@]}" >&2
    touch "$cache/.done"
fi
echo "$PWD/$cache"
