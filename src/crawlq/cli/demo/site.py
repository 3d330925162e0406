"""The demo's generated site: a deterministic web of pages spread over several hosts.

`generate_site` builds it from a seed without any I/O. Page ``i`` lives on
host ``i % hosts``; each host's home page is ``/`` and the others are
``/s<section>/page-<n>.html``. A random spanning tree makes every page
reachable from the home pages, and extra links are added on top: mostly within
a host, some across hosts, some repeated verbatim, some carrying ``utm_*``
tracking parameters or a ``#fragment`` (so deduplication has work to do), and
a few pointing at paths that do not exist (404). About one page in a hundred
answers 500. Hrefs are written absolute, root-relative or relative, so the
crawler must resolve them.
"""

from __future__ import annotations

import posixpath
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

__all__ = ["Link", "Page", "Site", "generate_site"]

_SECTIONS: Final = 5
_TRACKING: Final = ("?utm_source=demo", "?utm_source=feed&utm_medium=rss", "?utm_campaign=spring")
_FRAGMENTS: Final = ("#top", "#comments", "#main")

#: A page or missing path on the site: ``(host index, path)``.
PageKey = tuple[int, str]
Style = Literal["absolute", "root", "relative"]


@dataclass(frozen=True, slots=True)
class Link:
    """One ``<a href>`` on a page: its target, how it is written and any suffix."""

    host: int
    path: str
    style: Style
    #: ``""``, a tracking query string or a fragment.
    suffix: str = ""


@dataclass(frozen=True, slots=True)
class Page:
    """A page of the site: where it lives, what it answers and what it links to."""

    host: int
    path: str
    status: int
    #: Seconds the server waits before answering, to look like a real server.
    latency: float
    links: tuple[Link, ...]


@dataclass(frozen=True, slots=True)
class Site:
    """A generated site: its pages by ``(host, path)`` and the 404 paths linked to."""

    hosts: int
    seed: int
    pages: Mapping[PageKey, Page]
    #: Paths that links point to but that are not pages (they answer 404).
    broken: frozenset[PageKey]

    @property
    def expected_fetches(self) -> int:
        """Distinct URLs a correct crawl fetches: every page and every broken link."""
        return len(self.pages) + len(self.broken)

    def home(self, host: int) -> Page:
        """Return the home page (``/``) of ``host``."""
        return self.pages[(host, "/")]

    def render(self, page: Page, base_urls: Sequence[str]) -> str:
        """Return the HTML of ``page``, with ``base_urls[h]`` the root URL of host ``h``."""
        parts = [
            f"<!doctype html><html><head><title>{page.path} on host {page.host}</title>",
            "</head><body><h1>crawlq demo</h1><ul>",
        ]
        for link in page.links:
            href = _href(page, link, base_urls)
            parts.append(f'<li><a href="{href}">{link.path}</a></li>')
        parts.append(
            '</ul><p><a href="mailto:nobody@example.invalid">contact</a></p></body></html>'
        )
        return "".join(parts)


def _href(page: Page, link: Link, base_urls: Sequence[str]) -> str:
    if link.style == "absolute" or link.host != page.host:
        return base_urls[link.host] + link.path + link.suffix
    if link.style == "root":
        return link.path + link.suffix
    return posixpath.relpath(link.path, posixpath.dirname(page.path)) + link.suffix


def _path(local: int) -> str:
    return "/" if local == 0 else f"/s{local % _SECTIONS}/page-{local}.html"


def generate_site(pages: int, hosts: int, *, seed: int = 0, latency: float = 0.0) -> Site:
    """Generate a site of ``pages`` pages over ``hosts`` hosts from ``seed``.

    The same arguments always give the same site. ``latency`` is the most a
    page makes the server wait (each page draws its own delay up to it).
    Raises ValueError unless ``1 <= hosts <= pages``.
    """
    if not 1 <= hosts <= pages:
        raise ValueError(f"need 1 <= hosts <= pages, got {hosts} hosts for {pages} pages")
    rng = random.Random(seed)
    keys: list[PageKey] = [(i % hosts, _path(i // hosts)) for i in range(pages)]
    homes = keys[:hosts]
    others = keys[hosts:]
    failing = set(rng.sample(others, len(others) // 100)) if others else set()
    links: dict[PageKey, list[Link]] = {key: [] for key in keys}

    # A spanning tree, so every page is reachable from the home pages.
    rng.shuffle(others)
    parents: list[list[PageKey]] = [[home] for home in homes]
    every_parent: list[PageKey] = list(homes)
    for key in others:
        host = key[0]
        parent = rng.choice(parents[host] if rng.random() < 0.7 else every_parent)
        links[parent].append(_link(rng, parent, key))
        if key not in failing:
            parents[host].append(key)
            every_parent.append(key)

    broken: set[PageKey] = set()
    for key in every_parent:
        page_links = links[key]
        for _ in range(rng.randint(2, 6)):
            # Mostly a page of the same host (keys[host::hosts] are its pages).
            target = rng.choice(keys[key[0] :: hosts] if rng.random() < 0.75 else keys)
            page_links.append(_link(rng, key, target))
        for _ in _times(rng, 0.3):
            page_links.append(rng.choice(page_links))  # the same href again
        for _ in _times(rng, 0.25):
            source = rng.choice(page_links)
            page_links.append(Link(source.host, source.path, source.style, rng.choice(_TRACKING)))
        for _ in _times(rng, 0.1):
            source = rng.choice(page_links)
            page_links.append(Link(source.host, source.path, source.style, rng.choice(_FRAGMENTS)))
        if rng.random() < 0.03:
            missing = (key[0], f"/s{rng.randrange(_SECTIONS)}/gone-{rng.randrange(pages)}.html")
            broken.add(missing)
            page_links.append(_link(rng, key, missing))
        rng.shuffle(page_links)

    site_pages = {
        key: Page(
            host=key[0],
            path=key[1],
            status=500 if key in failing else 200,
            latency=rng.uniform(0.0, latency) if latency > 0 else 0.0,
            links=tuple(links[key]) if key not in failing else (),
        )
        for key in keys
    }
    return Site(
        hosts=hosts, seed=seed, pages=site_pages, broken=frozenset(broken - set(site_pages))
    )


def _link(rng: random.Random, source: PageKey, target: PageKey) -> Link:
    style: Style = "absolute"
    if source[0] == target[0]:
        style = rng.choice(("absolute", "root", "relative", "relative"))
    return Link(target[0], target[1], style)


def _times(rng: random.Random, probability: float) -> Iterator[None]:
    """Yield while a draw falls under ``probability``: zero or more times, geometrically."""
    while rng.random() < probability:
        yield None
