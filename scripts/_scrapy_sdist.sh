#!/usr/bin/env bash
# Fetch Scrapy's sdist (its test suite) once and the few packages its tests
# need, for tests/scrapy/test_scrapy_suite.py and scripts/scrapy-suite.
#   scripts/_scrapy_sdist.sh [VERSION]   (default: the Scrapy installed in .venv)
# Prints the cache directory, .venv/scrapy-sdist/VERSION, which holds:
#   scrapy-VERSION/  the unpacked sdist (its tests/ and conftest.py)
#   site/            the test requirements these tests import (pytest-twisted or
#                    testfixtures) and Scrapy VERSION itself when it is not the
#                    installed one: put it first on PYTHONPATH.
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
        extra+=("scrapy==$version")
        case $version in
            # Its HTTP handler imports twisted.internet._sslverify._setAcceptableProtocols,
            # which the Twisted releases of 2026 no longer have.
            2.13.*) extra+=("Twisted==25.5.0") ;;
        esac
    fi
    "$py" -m pip install --quiet --no-deps --target "$cache/site" "${extra[@]}" >&2
    touch "$cache/.done"
fi
echo "$PWD/$cache"
