"""The documentation site: public names documented in shape, every page whole, a strict build."""

from __future__ import annotations

import importlib.util
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import crawlq
import crawlq.contrib.scrapy

ROOT = Path(__file__).parent.parent
DOCS = ROOT / "docs"


def _hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _public_objects() -> list[tuple[str, object]]:
    """Every public class and function, and the public methods and properties of the classes."""
    found: list[tuple[str, object]] = []
    for module in (crawlq, crawlq.contrib.scrapy):
        for name in module.__all__:
            obj = getattr(module, name)
            if not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue  # constants (MAX_URL_LENGTH, __version__)
            qualified = f"{module.__name__}.{name}"
            found.append((qualified, obj))
            if not inspect.isclass(obj):
                continue
            for attribute, member in vars(obj).items():
                if attribute.startswith("_") and attribute not in ("__init__", "__len__"):
                    continue
                if isinstance(member, property | staticmethod | classmethod):
                    member = member.fget if isinstance(member, property) else member.__func__
                if inspect.isfunction(member):
                    found.append((f"{qualified}.{attribute}", member))
    return found


def _shape_problem(doc: str | None) -> str | None:
    if not doc or not doc.strip():
        return "no docstring"
    lines = inspect.cleandoc(doc).splitlines()
    if not lines[0].strip():
        return "the first line is empty: it must be the summary"
    if len(lines) > 1 and lines[1].strip():
        return "the summary runs onto a second line (one line, then a blank line)"
    return None


def test_every_public_name_has_a_docstring_in_shape() -> None:
    """One summary line, then (after a blank line) behaviour and what it raises."""
    problems = []
    for name, obj in _public_objects():
        if name.endswith((".__init__", ".__len__")) and not obj.__doc__:
            continue  # documented on the class
        problem = _shape_problem(obj.__doc__)
        if problem:
            problems.append(f"{name}: {problem}")
    assert problems == []
    assert len(_public_objects()) > 100  # classes with their methods, not only names


def test_the_shape_check_catches_a_bad_docstring() -> None:
    assert _shape_problem(None) == "no docstring"
    assert _shape_problem("Two lines\nof summary.") is not None
    assert _shape_problem("One line.\n\nThen behaviour.") is None


def test_every_page_names_sections_and_files_that_exist() -> None:
    hooks = _hooks()
    pages = sorted(DOCS.rglob("*.md"))
    assert len(pages) >= 10
    for page in pages:
        expanded = hooks.expand(page.read_text())  # raises for an unknown section
        left = [
            line for line in expanded.splitlines() if line.startswith(("<!-- readme:", "<!-- file"))
        ]
        assert left == [], page
    with pytest.raises(ValueError, match="no section"):
        hooks.expand("<!-- readme: No Such Section -->\n")


def test_every_readme_section_is_on_a_page() -> None:
    """Nothing in the README is missing from the site (but its list of the site's pages)."""
    hooks = _hooks()
    sections = set(hooks.readme_sections((ROOT / "README.md").read_text()))
    used = set()
    for page in DOCS.rglob("*.md"):
        for line in page.read_text().splitlines():
            if line.startswith("<!-- readme: "):
                used.add(line.removeprefix("<!-- readme: ").removesuffix(" -->"))
    assert sections - used == {"Documentation"}


def _links(text: str) -> set[str]:
    return {link.split("#")[0] for link in re.findall(r"\]\(([^)\s]+\.md(?:#[^)]*)?)\)", text)}


def test_the_readme_and_the_home_page_lead_to_every_page() -> None:
    """A newcomer reaches every page from the README, and from the site's home page."""
    nav = set(re.findall(r":\s+(\S+\.md)$", (ROOT / "mkdocs.yml").read_text(), re.MULTILINE))
    assert len(nav) >= 10
    readme = {link.removeprefix("docs/") for link in _links((ROOT / "README.md").read_text())}
    assert nav - {"index.md", "reference/scrapy.md"} <= readme
    home = _links((DOCS / "index.md").read_text())
    assert nav - {"index.md", "reference/scrapy.md"} <= home
    for link in readme | home:
        assert (DOCS / link).exists(), link


def test_the_site_builds_with_no_warning(tmp_path: Path) -> None:
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    api = (tmp_path / "reference" / "api" / "index.html").read_text()
    for name in ("open_frontier", "Frontier", "Scheduler", "Request"):
        assert f'id="crawlq.{name}"' in api, name
    home = (tmp_path / "index.html").read_text()
    assert "Find what you need" in home


def test_the_scrapy_settings_table_lists_every_setting_the_code_reads() -> None:
    """The generated table is the code's list: a setting read but not listed (or the
    reverse) fails here."""
    import crawlq.contrib.scrapy

    read = set()
    for module in (ROOT / "src" / "crawlq" / "contrib" / "scrapy").glob("*.py"):
        read |= set(re.findall(r'"(CRAWLQ_[A-Z_]+)"', module.read_text()))
    doc = crawlq.contrib.scrapy.__doc__ or ""
    listed = set(re.findall(r"^\| `(CRAWLQ_[A-Z_]+)`", doc, re.MULTILINE))
    assert read == listed
    assert _hooks().scrapy_settings().count("| `CRAWLQ_") == len(listed)


def test_the_scrapy_settings_table_is_generated_without_scrapy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`pip install '.[docs]'` alone builds the site: the hook reads the adapter's
    docstring from its source, as importing the adapter needs Scrapy."""
    # None in sys.modules makes an import raise ImportError; the adapter too,
    # as this module has imported it already.
    monkeypatch.setitem(sys.modules, "scrapy", None)
    monkeypatch.setitem(sys.modules, "crawlq.contrib.scrapy", None)
    with pytest.raises(ImportError):
        import crawlq.contrib.scrapy  # noqa: F401
    table = _hooks().scrapy_settings()
    assert table.startswith("| setting | default | meaning |\n| --- |")
    assert "| `CRAWLQ_URL` |" in table
