"""MkDocs hook: pages take sections of the README, so the prose lives in one place.

A line ``<!-- readme: Section Title -->`` in a page is replaced by that ``##``
section of README.md (its subheadings one level down, under the page's own
headings); ``<!-- file: path -->`` by a Markdown file of the repository
without its ``#`` title, and ``<!-- file-deeper: path -->`` the same with its
headings one level down; ``<!-- generated: scrapy-settings -->`` by the
settings table of ``crawlq.contrib.scrapy`` (the code's own list, read from
its source without importing Scrapy), and
``<!-- generated: cli-reference -->`` by every command and option of the
``crawlq`` command, read from the typer app. A name that matches nothing
fails the build, so a renamed section cannot drop out silently. The
benchmark chart is copied in.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
_DIRECTIVE = re.compile(
    r"^<!-- (readme|file|file-deeper|generated): (.+?) -->$", re.MULTILINE
)


def readme_sections(text: str) -> dict[str, str]:
    """README.md's ``##`` sections by title (without their heading line)."""
    sections: dict[str, str] = {}
    title = None
    lines: list[str] = []
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if not fenced and line.startswith("## "):
            if title is not None:
                sections[title] = "\n".join(lines).strip() + "\n"
            title, lines = line[3:].strip(), []
        elif title is not None:
            lines.append(line)
    if title is not None:
        sections[title] = "\n".join(lines).strip() + "\n"
    return sections


def expand(markdown: str) -> str:
    """``markdown`` with every directive replaced; ValueError names an unknown one."""
    sections = readme_sections((ROOT / "README.md").read_text())

    def replace(match: re.Match[str]) -> str:
        kind, name = match.groups()
        if kind == "generated":
            if name not in GENERATORS:
                raise ValueError(f"no generated block {name!r}: {sorted(GENERATORS)}")
            return GENERATORS[name]()
        if kind != "readme":
            text = re.sub(r"\A# .*\n", "", (ROOT / name).read_text())
            return _deeper(text) if kind == "file-deeper" else text
        if name not in sections:
            raise ValueError(f"README.md has no section {name!r}: {sorted(sections)}")
        return _deeper(sections[name])

    return _DIRECTIVE.sub(replace, markdown)


SCRAPY_ADAPTER = ROOT / "src" / "crawlq" / "contrib" / "scrapy" / "__init__.py"


def scrapy_settings() -> str:
    """The settings table of ``crawlq.contrib.scrapy``'s docstring, as it stands.

    The docstring is read from the source with `ast`, not imported: importing
    the adapter needs Scrapy, and the ``docs`` extra alone builds the site.
    """
    doc = ast.get_docstring(ast.parse(SCRAPY_ADAPTER.read_text()), clean=True)
    table = [line for line in (doc or "").splitlines() if line.startswith("|")]
    if len(table) < 3:
        raise ValueError("crawlq.contrib.scrapy's docstring has no settings table")
    return "\n".join(table) + "\n"


def cli_reference() -> str:
    """Every ``crawlq`` command with its arguments and options, from the typer app."""
    import click
    import typer.main

    from crawlq.cli import app

    group = typer.main.get_command(app)
    out = []
    for name, command in sorted(group.commands.items()):  # type: ignore[attr-defined]
        out += [f"#### `crawlq {name}`", "", (command.help or "").strip().split("\n\n")[0], ""]
        rows = []
        for param in command.params:
            if param.name == "help":
                continue
            if isinstance(param, click.Argument):
                names = "`" + (param.name or "").upper() + "`"
            else:
                names = ", ".join(f"`{opt}`" for opt in (*param.opts, *param.secondary_opts))
            text = " ".join((getattr(param, "help", None) or "").split())
            default = param.default if isinstance(param, click.Option) else None
            shown = "" if default in (None, False, (), []) else f"`{default}`"
            rows.append(f"| {names} | {shown} | {text} |")
        if rows:
            out += ["| argument or option | default | meaning |", "| --- | --- | --- |", *rows, ""]
    return "\n".join(out) + "\n"


GENERATORS = {"scrapy-settings": scrapy_settings, "cli-reference": cli_reference}


def _deeper(section: str) -> str:
    """Headings one level down (a README "###" is a subsection of the page's ``##``)."""
    out = []
    fenced = False
    for line in section.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        out.append("#" + line if not fenced and line.startswith("#") else line)
    return "\n".join(out) + "\n"


def on_page_markdown(markdown: str, **_: Any) -> str:
    return expand(markdown)


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    files.append(
        File(
            "results.png",
            str(ROOT / "benchmarks"),
            config["site_dir"],
            config["use_directory_urls"],
        )
    )
    return files
