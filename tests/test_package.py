"""The sdist and the wheel: built from the checkout, passing `twine check`, holding what they must.

The build runs as a user's would (`python -m build`, isolated: pip fetches the
build backend), once for the module.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
LUA = ROOT / "src" / "crawlq" / "stores" / "redis" / "lua"


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``{"sdist": path, "wheel": path}``, built from the checkout."""
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(out), str(ROOT)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    sdists, wheels = sorted(out.glob("*.tar.gz")), sorted(out.glob("*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, sorted(out.iterdir())
    return {"sdist": sdists[0], "wheel": wheels[0]}


def test_twine_check_passes_on_both(dist: dict[str, Path]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", dist["sdist"], dist["wheel"]],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("PASSED") == 2, done.stdout


def test_the_wheel_holds_the_package_data_and_the_license_only(dist: dict[str, Path]) -> None:
    with zipfile.ZipFile(dist["wheel"]) as wheel:
        names = set(wheel.namelist())
        info = f"crawlq-{PROJECT['version']}.dist-info"
        metadata = wheel.read(f"{info}/METADATA").decode()
    assert "crawlq/py.typed" in names
    lua = {f"crawlq/stores/redis/lua/{path.name}" for path in LUA.glob("*.lua")}
    assert len(lua) >= 2  # the library's files, whatever their names
    assert lua - names == set()
    assert f"{info}/licenses/LICENSE" in names
    assert f"License-Expression: {PROJECT['license']}" in metadata
    assert "crawlq/__init__.py" in names and "crawlq/contrib/scrapy/__init__.py" in names
    stray = sorted(name for name in names if not name.startswith(("crawlq/", info + "/")))
    assert stray == []  # no tests/, benchmarks/, examples/ or anything else
    assert not any("__pycache__" in name or name.endswith(".pyc") for name in names)


def test_the_sdist_holds_the_license_and_the_changelog(dist: dict[str, Path]) -> None:
    top = f"crawlq-{PROJECT['version']}"
    with tarfile.open(dist["sdist"]) as sdist:
        names = set(sdist.getnames())
    for name in ("LICENSE", "CHANGELOG.md", "README.md", "pyproject.toml", "src/crawlq/py.typed"):
        assert f"{top}/{name}" in names, name
    lua = {f"{top}/src/crawlq/stores/redis/lua/{path.name}" for path in LUA.glob("*.lua")}
    assert lua - names == set()
