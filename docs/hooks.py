"""MkDocs hook: pages take sections of the README, so the prose lives in one place.

A line ``<!-- readme: Section Title -->`` in a page is replaced by that ``##``
section of README.md (its subheadings one level down, under the page's own
headings); ``<!-- file: path -->`` by a Markdown file of the repository
without its ``#`` title, and ``<!-- file-deeper: path -->`` the same with its
headings one level down. A name that matches nothing fails the build, so a
renamed section cannot drop out silently. The benchmark chart is copied in.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
_DIRECTIVE = re.compile(r"^<!-- (readme|file|file-deeper): (.+?) -->$", re.MULTILINE)


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
        if kind != "readme":
            text = re.sub(r"\A# .*\n", "", (ROOT / name).read_text())
            return _deeper(text) if kind == "file-deeper" else text
        if name not in sections:
            raise ValueError(f"README.md has no section {name!r}: {sorted(sections)}")
        return _deeper(sections[name])

    return _DIRECTIVE.sub(replace, markdown)


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
