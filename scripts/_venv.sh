# Sourced by scripts/*: make .venv with crawlq and its dev extras installed.
# Reinstalls when pyproject.toml changed since the last install.
python=${PYTHON:-python3}
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "crawlq needs Python 3.11 or newer; set PYTHON=/path/to/python3.11" >&2
    exit 1
fi
if [ ! -x .venv/bin/python ]; then
    echo "first run: making a virtualenv in .venv and installing crawlq with its" \
        "dev extras (aiohttp, redis, scrapy, pytest...); this takes a minute or two" >&2
    "$python" -m venv .venv
elif [ ! -f .venv/.installed ] || [ pyproject.toml -nt .venv/.installed ]; then
    echo "pyproject.toml changed: updating .venv (a minute or so)" >&2
fi
if [ ! -f .venv/.installed ] || [ pyproject.toml -nt .venv/.installed ]; then
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -e ".[dev]"
    touch .venv/.installed
    echo ".venv is ready" >&2
fi
