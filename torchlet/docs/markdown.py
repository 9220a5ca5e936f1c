"""The repository's reader documents (docs/*.md: learners, usage, contract, benchmarks, ...) as
pages of the site, so the index can link them and the links still stay inside the site.

Only what those files use is rendered: headings, code (fenced, also inside a list item, or
indented four spaces), tables, lists, images, links and `code`. A link to a file the site does
not hold keeps its text and loses its link. Each heading has the id GitHub gives it (its text,
lower case, punctuation dropped, spaces as hyphens; a repeated one numbered), so a link to
`parts.md#pagedkvpart` lands on the same heading on GitHub and on the site. A line that is an
HTML comment (docs/parts.md's generated blocks' markers) is dropped, and a backslash before a
`|` in a table cell keeps the `|` inside the cell."""
from __future__ import annotations

import re
from html import escape

INLINE = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)|`([^`]+)`|\*\*([^*]+)\*\*")


def inline(text: str, keep) -> str:
    """`keep(target)` -> the href to use for a link or image, or None to drop the link."""
    out, at = [], 0
    for m in INLINE.finditer(text):
        out.append(escape(text[at:m.start()], quote=False))
        at = m.end()
        bang, label, target, code, bold = m.groups()
        if code is not None:
            out.append(f"<code>{escape(code)}</code>")
        elif bold is not None:
            out.append(f"<strong>{escape(bold)}</strong>")
        else:
            href = keep(target)
            if bang:
                out.append(f'<img src="{escape(href)}" alt="{escape(label)}">' if href
                           else escape(label))
            else:
                out.append(f'<a href="{escape(href)}">{escape(label)}</a>' if href
                           else escape(label))
    out.append(escape(text[at:], quote=False))
    return "".join(out)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: its text without markup, lower case, only letters, digits,
    spaces, hyphens and underscores kept, each space a hyphen."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").replace("**", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def render(text: str, keep) -> str:
    out, para, lines = [], [], text.splitlines()
    ids: dict[str, int] = {}

    def flush():
        if para:
            out.append("<p>" + inline(" ".join(para), keep) + "</p>")
            para.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("```"):  # a fence, also one indented under a list item
            flush()
            indent = len(line) - len(line.lstrip())
            j = i + 1
            while j < len(lines) and not lines[j].lstrip().startswith("```"):
                j += 1
            out.append("<pre>" + escape("\n".join(x[indent:] for x in lines[i + 1:j])) + "</pre>")
            i = j + 1
            continue
        if line.startswith("    ") and line.strip() and not para:
            # indented code: up to the next line of text at the margin
            j = i
            while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()):
                j += 1
            while not lines[j - 1].strip():
                j -= 1
            out.append("<pre>" + escape("\n".join(x[4:] for x in lines[i:j])) + "</pre>")
            i = j
            continue
        if re.fullmatch(r"\s*<!--.*-->\s*", line):
            flush()
        elif line.startswith("#"):
            flush()
            level = min(len(line) - len(line.lstrip("#")), 4)
            heading = line.lstrip("#").strip()
            anchor = slug(heading)
            seen = ids.get(anchor, 0)
            ids[anchor] = seen + 1
            anchor = f"{anchor}-{seen}" if seen else anchor
            out.append(f'<h{level} id="{escape(anchor)}">{inline(heading, keep)}</h{level}>')
        elif line.startswith("|"):
            flush()
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                cells = [c.strip() for c in lines[i].strip().strip("|").split(" | ")]
                if not re.fullmatch(r"[\s|:-]+", lines[i]):  # not the rule under the header
                    tag = "th" if not rows else "td"
                    rows.append("<tr>" + "".join(
                        f"<{tag}>{inline(c.replace(chr(92) + '|', '|'), keep)}</{tag}>"
                        for c in cells) + "</tr>")
                i += 1
            out.append("<table>" + "".join(rows) + "</table>")
            continue
        elif re.match(r"\s*([-*]|\d+\.) ", line):
            flush()
            item = [re.sub(r"^\s*([-*]|\d+\.) ", "", line)]
            while i + 1 < len(lines) and lines[i + 1].startswith("  ") and lines[i + 1].strip():
                i += 1
                item.append(lines[i].strip())
            out.append("<ul><li>" + inline(" ".join(item), keep) + "</li></ul>")
        elif not line.strip():
            flush()
        else:
            para.append(line.strip())
        i += 1
    flush()
    # items one after another (a blank line between them or not) are one list
    return "".join(out).replace("</li></ul><ul><li>", "</li><li>")
