#!/usr/bin/env python3
"""Checks that every relative link and anchor of the documentation resolves.

    check_links.py SOURCE_ROOT

Reads README.md and every docs/*.md under SOURCE_ROOT, finds the Markdown
links and images, [text](target) and reference definitions [label]: target,
outside fenced code blocks, inline code and HTML comments, and checks each
one that is not a URL (http:, https:, mailto: or any other scheme): the path,
relative to the page (or to SOURCE_ROOT when it starts with /), must exist,
and an anchor (path#anchor, or #anchor alone for the page itself) must name
a heading of the target .md file as GitHub spells it (lowercase; characters
other than letters, digits, spaces, '-' and '_' removed; spaces to '-'; a
repeated heading gets -1, -2, ...) or an explicit <a id="..."> / <a name="...">.
An anchor into a file that is not Markdown is not checked.

Prints each broken link as FILE:LINE: link 'target': why (and a count on
stderr), and exits 1 if there is any; else prints
"docs links: ok (N links in M files)" and exits 0.
Standard library only.
"""
import os
import re
import sys
import urllib.parse

FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
SETEXT_UNDERLINE = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
EXPLICIT_ANCHOR = re.compile(r"<a\s[^>]*?\b(?:id|name)\s*=\s*(?:\"([^\"]*)\"|'([^']*)'|([^\s>]+))", re.IGNORECASE)
INLINE_LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*(<[^>\n]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)")
REFERENCE_DEFINITION = re.compile(r"^ {0,3}\[([^\]]+)\]:\s*(<[^>\n]*>|\S+)", re.MULTILINE)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def blank(text, start, end):
    """text with [start, end) replaced by spaces, its newlines kept (line numbers stay)."""
    return text[:start] + re.sub(r"[^\n]", " ", text[start:end]) + text[end:]


def without_code_blocks(text):
    """The page with fenced code blocks and HTML comments blanked out (lines kept)."""
    lines = text.split("\n")
    fence = None  # the opening fence's character and length while inside a block
    for i, line in enumerate(lines):
        match = FENCE.match(line)
        if fence is None:
            if match:
                fence = (match.group(1)[0], len(match.group(1)))
                lines[i] = ""
            continue
        # A closing fence: the same character, at least as many, nothing after it.
        if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= fence[1] \
                and not line.strip().strip(fence[0]):
            fence = None
        lines[i] = ""
    text = "\n".join(lines)
    for comment in reversed(list(re.finditer(r"<!--.*?-->", text, re.DOTALL))):
        text = blank(text, comment.start(), comment.end())
    return text


def prose(text):
    """The page with fenced code blocks, HTML comments and inline code blanked out."""
    text = without_code_blocks(text)
    # Inline code: a run of n backticks up to the next run of exactly n, within a paragraph.
    backticks, paragraph_break = re.compile(r"`+"), re.compile(r"\n[ \t]*\n")
    i = 0
    while True:
        opening = backticks.search(text, i)
        if not opening:
            break
        closing = re.compile(r"(?<!`)`{%d}(?!`)" % len(opening.group(0))).search(text, opening.end())
        paragraph_end = paragraph_break.search(text, opening.end())
        if closing and (not paragraph_end or closing.start() < paragraph_end.start()):
            text = blank(text, opening.start(), closing.end())
            i = closing.end()
        else:
            i = opening.end()  # literal backticks
    return text


def heading_text(raw):
    """What GitHub renders of a heading's Markdown, as its slug is computed from it."""
    text = re.sub(r"!\[([^\]]*)\]\([^)]*\)", r"\1", raw)       # images: their alt text
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)        # links: their text
    text = re.sub(r"<[^>]+>", "", text)                          # HTML tags
    text = text.replace("`", "").replace("*", "")
    return text.strip()


def slug(text):
    text = text.lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


anchor_cache = {}


def anchors(path):
    """Every anchor a Markdown file defines: its headings' slugs and explicit <a id/name>."""
    if path in anchor_cache:
        return anchor_cache[path]
    with open(path, encoding="utf-8") as f:
        text = f.read()
    found, seen = set(), {}
    lines = without_code_blocks(text).split("\n")
    for i, line in enumerate(lines):
        heading = None
        match = ATX_HEADING.match(line)
        if match:
            heading = match.group(2) or ""
        elif i > 0 and lines[i - 1].strip() and SETEXT_UNDERLINE.match(line) \
                and not ATX_HEADING.match(lines[i - 1]) and not lines[i - 1].lstrip().startswith(("|", "-", "*", ">")):
            heading = lines[i - 1].strip()
        if heading is None:
            continue
        base = slug(heading_text(heading))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    for match in EXPLICIT_ANCHOR.finditer(text):
        found.add(next(g for g in match.groups() if g is not None))
    anchor_cache[path] = found
    return found


def check(root, page, problems):
    """Checks the links of one page; returns how many it checked."""
    path = os.path.join(root, page)
    with open(path, encoding="utf-8") as f:
        text = prose(f.read())
    targets = [(m.start(2), m.group(2)) for m in INLINE_LINK.finditer(text)]
    targets += [(m.start(2), m.group(2)) for m in REFERENCE_DEFINITION.finditer(text)]
    checked = 0
    for offset, target in sorted(targets):
        line = text.count("\n", 0, offset) + 1
        target = target.strip()
        if target.startswith("<") and target.endswith(">"):
            target = target[1:-1]
        if not target or SCHEME.match(target):
            continue
        checked += 1
        where, _, anchor = target.partition("#")
        where = urllib.parse.unquote(where)
        anchor = urllib.parse.unquote(anchor)
        if not where:
            resolved = path
        elif where.startswith("/"):
            resolved = os.path.normpath(os.path.join(root, where.lstrip("/")))
        else:
            resolved = os.path.normpath(os.path.join(os.path.dirname(path), where))
        shown = os.path.relpath(resolved, root)

        def report(why):
            problems.append(f"{page}:{line}: link '{target}': {why}")

        if not os.path.exists(resolved):
            report(f"no file {shown}")
            continue
        if not anchor or not resolved.endswith(".md"):
            continue
        if os.path.isdir(resolved):
            report(f"{shown} is a folder, not a page with anchor '{anchor}'")
        elif anchor not in anchors(resolved):
            report(f"no heading or anchor '#{anchor}' in {shown}")
    return checked


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: check_links.py SOURCE_ROOT")
    root = os.path.abspath(sys.argv[1])
    pages = []
    if os.path.isfile(os.path.join(root, "README.md")):
        pages.append("README.md")
    docs = os.path.join(root, "docs")
    if os.path.isdir(docs):
        pages += sorted(os.path.join("docs", name) for name in os.listdir(docs) if name.endswith(".md"))
    if not pages:
        sys.exit(f"docs links: no README.md or docs/*.md under {root}")
    problems = []
    links = sum(check(root, page, problems) for page in pages)
    for problem in problems:
        print(problem)
    if problems:
        print(f"docs links: {len(problems)} broken of {links} links in {len(pages)} files", file=sys.stderr)
        return 1
    print(f"docs links: ok ({links} links in {len(pages)} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
