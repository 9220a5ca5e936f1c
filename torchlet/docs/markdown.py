"""The repository's reader documents (docs/learners.md, docs/benchmarks.md, docs/mutants.md) as
pages of the site, so the index can link them and the links still stay inside the site.

Only what those files use is rendered: headings, fenced code, tables, lists, images, links and
`code`. A link to a file the site does not hold keeps its text and loses its link."""
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


def render(text: str, keep) -> str:
    out, para, lines = [], [], text.splitlines()

    def flush():
        if para:
            out.append("<p>" + inline(" ".join(para), keep) + "</p>")
            para.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            flush()
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            out.append("<pre>" + escape("\n".join(lines[i + 1:j])) + "</pre>")
            i = j + 1
            continue
        if line.startswith("#"):
            flush()
            level = min(len(line) - len(line.lstrip("#")), 4)
            out.append(f"<h{level}>{inline(line.lstrip('#').strip(), keep)}</h{level}>")
        elif line.startswith("|"):
            flush()
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                cells = [c.strip() for c in lines[i].strip().strip("|").split(" | ")]
                if not all(set(c) <= set("-: ") for c in cells):
                    tag = "th" if not rows else "td"
                    rows.append("<tr>" + "".join(f"<{tag}>{inline(c, keep)}</{tag}>"
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
    return "".join(out)
