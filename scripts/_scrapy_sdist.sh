#!/usr/bin/env bash
# Fetch Scrapy's sdist (its test suite) once and the few packages its tests
# need, for tests/scrapy/test_scrapy_suite.py and scripts/scrapy-suite.
#   scripts/_scrapy_sdist.sh [VERSION]   (default: the Scrapy installed in .venv)
# Prints the cache directory, .venv/scrapy-sdist/VERSION, which holds:
#   scrapy-VERSION/  the unpacked sdist (its tests/ and conftest.py)
#   site/            pytest-twisted and its deps (and Scrapy VERSION itself when
#                    it is not the installed one): put it first on PYTHONPATH.
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
    # Scrapy's tests run under pytest-twisted with the asyncio reactor (its tox.ini).
    extra=(pytest-twisted greenlet decorator)
    if [ "$version" != "$installed" ]; then
        extra+=("scrapy==$version")
    fi
    "$py" -m pip install --quiet --no-deps --target "$cache/site" "${extra[@]}" >&2
    touch "$cache/.done"
fi
echo "$PWD/$cache"
