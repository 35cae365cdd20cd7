"""The documentation pages the audit's findings point to, as installed.

The pages are the trap pages of the documentation site (`docs/traps/*.md`
and `docs/symptoms.md` in the repository, their one source). Building the
package copies them into it (`setup.py`'s `build_py`: `pages/symptoms.md`
and `pages/traps/*.md` under `keras_stable/audit/`), so that a wheel or
`pip install .` can name a page and print it:
`python -m keras_stable.audit --explain norm_at_zero`. A checkout or an
editable install has no copy and reads them from `docs/`.
"""

import importlib.resources
import pathlib
import re

from keras_stable.audit.catalogue import TRAPS

EXPLAIN = "python -m keras_stable.audit --explain"


def _pages():
    """{file name: file} of the pages: the package's copy made by the build,
    else the `docs/` of the checkout the package is imported from."""
    root = importlib.resources.files("keras_stable.audit") / "pages"
    if not root.is_dir():
        root = pathlib.Path(__file__).resolve().parents[2] / "docs"
        if not (root / "symptoms.md").is_file():
            raise FileNotFoundError(
                "keras_stable's documentation pages are missing: neither the built "
                "package's keras_stable/audit/pages/ nor a checkout's docs/ next to "
                f"the package ({root})"
            )
    files = [root / "symptoms.md", *(root / "traps").iterdir()]
    return {f.name: f for f in files if f.name.endswith(".md")}


def page_names():
    """The shipped pages, by file stem (`"norm-at-zero"`, ...), sorted."""
    return sorted(name[: -len(".md")] for name in _pages())


def _page_of(name):
    """The page file of a trap id (`"norm_at_zero"`) or of a page stem
    (`"norm-at-zero"`), or None."""
    if name in TRAPS:
        return TRAPS[name]["doc"]
    if name in page_names():
        return name + ".md"
    return None


def page_text(name):
    """The text of the page of a trap id or a page stem (`KeyError` for
    neither)."""
    page = _page_of(name)
    if page is None:
        raise KeyError(name)
    return _pages()[page].read_text(encoding="utf-8")


def page_title(name):
    """The page's title: its first `# ` heading."""
    for line in page_text(name).splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return name


def reference(trap):
    """Where a finding of `trap` is explained: the page's title and the
    command that prints it (the site's section "Traps" holds the same
    page)."""
    return f'"{page_title(trap)}" ({EXPLAIN} {trap})'


# -- the page as terminal text (`--explain`) ---------------------------------

_LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
_EMPHASIS = re.compile(r"(\*\*|\*)(?=\S)(.+?)(?<=\S)\1", re.DOTALL)
# A sentence that names the script which generated a figure or a number:
# a file of the repository, not of the installed package.
_GENERATED_BY = re.compile(r"\s*(?:Generated|Measured) by `docs/scripts/[\w./-]+`\.")
_REPOSITORY_PATH = re.compile(r"`((?:examples|tests|benchmarks|docs)/[\w./-]+)`")


def _inline(text):
    """One line of Markdown as text: links without their targets, no
    emphasis markers (code spans are kept as they are)."""

    def link(match):
        image, label, target = match.groups()
        if image:
            return f"[figure: {label}]" if label else "[figure]"
        if "://" in target:
            return f"{label} ({target})"
        stem = target.split("#")[0].rsplit("/", 1)[-1]
        stem = stem[: -len(".md")] if stem.endswith(".md") else stem
        if stem in page_names():
            return f"{label} ({EXPLAIN} {stem})"
        return label

    codes = []

    def hide(match):
        codes.append(match.group(0))
        return f"\0{len(codes) - 1}\0"

    text = _EMPHASIS.sub(r"\2", _LINK.sub(link, _CODE_SPAN.sub(hide, text)))
    return re.sub("\0(\\d+)\0", lambda m: codes[int(m.group(1))], text)


def _cells(row):
    row = row.strip()
    if row.startswith("|"):
        row = row[1:]
    if row.endswith("|") and not row.endswith("\\|"):
        row = row[:-1]
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", row)]


def _table(rows):
    """A Markdown table as one block per row: `- header: cell` lines."""
    header = [_inline(cell) for cell in _cells(rows[0])]
    lines = []
    for row in rows[2:]:
        cells = [_inline(cell) for cell in _cells(row)]
        first = True
        for name, cell in zip(header, cells):
            if not cell:
                continue
            label = f"{name}: " if name else ""
            lines.append(("- " if first else "  ") + label + cell)
            first = False
    return lines


def _paragraphs(lines):
    """Markdown lines as blocks: ("code", lines), ("table", lines),
    ("heading", line) and ("prose", lines) paragraphs, blank lines apart."""
    n = 0
    prose = []
    while n < len(lines):
        line = lines[n]
        if line.lstrip().startswith("```"):
            end = n + 1
            while end < len(lines) and not lines[end].lstrip().startswith("```"):
                end += 1
            if prose:
                yield "prose", prose
                prose = []
            yield "code", lines[n + 1 : end]
            n = end + 1
        elif line.startswith("|") and n + 1 < len(lines) and set(lines[n + 1]) <= set("|-: "):
            end = n
            while end < len(lines) and lines[end].startswith("|"):
                end += 1
            if prose:
                yield "prose", prose
                prose = []
            yield "table", lines[n:end]
            n = end
        elif line.startswith("#") or not line.strip():
            if prose:
                yield "prose", prose
                prose = []
            if line.strip():
                yield "heading", line
            n += 1
        else:
            prose.append(line)
            n += 1
    if prose:
        yield "prose", prose


def as_text(markdown):
    """A page's Markdown as plain text for a terminal: headings underlined,
    tables as lists, links to another shipped page as the command that
    prints it, no emphasis markers, figures (and their captions) and the
    repository's plotting scripts left out, other repository paths marked
    as such. Code blocks are kept verbatim, indented."""
    markdown = _GENERATED_BY.sub("", markdown)
    blocks = []
    after_figure = False
    for kind, block in _paragraphs(markdown.splitlines()):
        if kind == "code":
            blocks.append("\n".join("    " + line if line.strip() else "" for line in block))
        elif kind == "table":
            blocks.append("\n".join(_table(block)))
        elif kind == "heading":
            level = len(block) - len(block.lstrip("#"))
            title = _inline(block[level:].strip())
            if level <= 2:
                title += "\n" + ("=" if level == 1 else "-") * len(title)
            blocks.append(title)
        else:
            text = "\n".join(block)
            if _LINK.fullmatch(text.strip()) and text.strip().startswith("!"):
                after_figure = True  # a figure: not in a terminal
                continue
            if after_figure and text.startswith("*") and text.rstrip().endswith("*"):
                after_figure = False  # its caption
                continue
            blocks.append(_inline(text))
        after_figure = False
    text = "\n\n".join(blocks)
    return _REPOSITORY_PATH.sub(r"`\1` (in the keras_stable source repository)", text) + "\n"


def explain_text(name):
    """What `--explain` prints for a trap id or a page stem (`KeyError` for
    neither): the page as plain text."""
    return as_text(page_text(name))
