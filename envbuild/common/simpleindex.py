"""The links of a PEP 503 ("simple") HTML project page: each file's name, URL and the data-*
attributes the PEPs after it added (requires-python, yanked, core-metadata). Pure."""

from __future__ import annotations

from html.parser import HTMLParser
from typing import NamedTuple
from urllib.parse import unquote, urljoin, urlsplit


class Link(NamedTuple):
    filename: str  # the URL's last path segment, unquoted (PEP 503: the link text is the same)
    url: str  # absolute, without the #hash fragment
    attrs: dict[str, str | None]


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.links.append(dict(attrs))


def links(html: str, page_url: str) -> list[Link]:
    """The page's <a href> links, in order."""
    parser = _Anchors()
    parser.feed(html)
    out = []
    for a in parser.links:
        href = a.get("href")
        if not href:
            continue
        url = urljoin(page_url, href)
        name = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
        out.append(Link(name, url.split("#", 1)[0], a))
    return out
