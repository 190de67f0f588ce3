"""The links of an HTML text and where its pixel goes, found by the stdlib's HTML
tokenizer (html.parser) and rewritten by offset, so that every other character
stays as it was.

The text is the HTML part's octets read as Latin-1 (one character per octet, see
html_parts), so an offset here is an octet's there. html.parser tells where each
start tag begins (`getpos`) and its exact text; the href's value is found in that
text with the parser's own attribute pattern, and checked against the value the
parser read. A text where that does not hold, or where `<a` or `<area` appears
more often than the parser saw such a tag (a link in a comment, a script, a
conditional comment: where a browser and this tokenizer may disagree), is not
rewritten at all. Sync, no I/O.
"""

from __future__ import annotations

import functools
import html
import re
from dataclasses import dataclass
from html import parser
from typing import Any

LINK_TAGS = frozenset({"a", "area"})
MAX_URL = 2000  # characters of a link rewritten at most: a longer one is left as it is
CACHED = 16  # texts whose links are kept, for the next recipients of the same message
_LINK_OPENINGS = re.compile(r"<(?:a|area)[\s/>]", re.IGNORECASE)
_NEWLINE = re.compile("\n")
# html.parser's own patterns, so that a tag's attributes are split here as the parser split them.
_TAG_NAME: re.Pattern[str] = getattr(parser, "tagfind_tolerant")  # noqa: B009
_ATTRIBUTE: re.Pattern[str] = getattr(parser, "attrfind_tolerant")  # noqa: B009


class Unsafe(Exception):
    """The text cannot be rewritten safely; its message says why."""


@dataclass(frozen=True, slots=True)
class Link:
    start: int  # the href's value in the text, quotes included
    end: int
    url: str  # as the browser reads it: character references resolved, white space stripped


@dataclass(frozen=True, slots=True)
class Found:
    links: tuple[Link, ...]  # every a/area href in order (any scheme)
    pixel_at: int  # where an image goes: before the last </body>, else </html>, else at the end


def find(text: str) -> Found:
    """The links of `text` and where its pixel goes; Unsafe when they cannot be told
    for sure. The recipients of a message share its HTML: the last texts' are kept."""
    found = _find(text)
    if isinstance(found, str):
        raise Unsafe(found)
    return found


@functools.lru_cache(maxsize=CACHED)
def _find(text: str) -> Found | str:
    scan = _Scan(text)
    try:
        scan.feed(text)
        scan.close()
    except Unsafe as exc:
        return str(exc)
    except (AssertionError, ValueError, IndexError) as exc:  # what html.parser raises on what it cannot read
        return f"the HTML tokenizer failed: {exc}"
    openings = len(_LINK_OPENINGS.findall(text))
    if openings != scan.tags:
        return f"{openings} link tags in the text, {scan.tags} read as tags (comments, scripts)"
    pixel = scan.body_end if scan.body_end is not None else scan.html_end
    return Found(tuple(scan.links), len(text) if pixel is None else pixel)


def replace(text: str, edits: list[tuple[int, int, str]]) -> str:
    """`text` with each (start, end) span, in order and apart, replaced."""
    kept, previous = [], 0
    for start, end, new in edits:
        kept += [text[previous:start], new]
        previous = end
    kept.append(text[previous:])
    return "".join(kept)


class _Scan(parser.HTMLParser):
    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self._text = text
        self._lines = [0, *(m.end() for m in _NEWLINE.finditer(text))]
        self.links: list[Link] = []
        self.tags = 0
        self.body_end: int | None = None
        self.html_end: int | None = None

    def _offset(self) -> int:
        line, column = self.getpos()
        return self._lines[line - 1] + column

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in LINK_TAGS:
            return
        self.tags += 1
        start = self._offset()
        raw = self.get_starttag_text() or ""
        if self._text[start : start + len(raw)] != raw:
            raise Unsafe(f"a <{tag}> tag not found where the tokenizer saw it")
        read = dict(reversed(attrs))  # the first of a repeated attribute counts, as in a browser
        link = _href(raw, start)
        if link is None:
            if read.get("href") is not None:
                raise Unsafe(f"the href of a <{tag}> tag not found where the tokenizer saw it")
            return
        if read.get("href") is None or link.url != (read["href"] or "").strip():
            raise Unsafe(f"the href of a <{tag}> tag reads otherwise than the tokenizer read it")
        self.links.append(link)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        if tag == "body":
            self.body_end = self._offset()
        elif tag == "html" and self.html_end is None:
            self.html_end = self._offset()

    def error(self, message: str) -> Any:  # older html.parser versions call it
        raise Unsafe(message)


def _href(raw: str, start: int) -> Link | None:
    """The first href of a start tag's text (at `start` in the text), its URL as written."""
    name = _TAG_NAME.match(raw, 1)
    if name is None:
        return None
    at = name.end()
    while at < len(raw):
        found = _ATTRIBUTE.match(raw, at)
        if found is None or found.end() == at:
            return None
        if found.group(1).lower() == "href" and found.group(2):
            value = found.group(3)
            begin, end = found.span(3)
            unquoted = value[1:-1] if value[:1] in "'\"" and value[-1:] == value[:1] and len(value) > 1 else value
            return Link(start + begin, start + end, html.unescape(unquoted).strip())
        at = found.end()
    return None
