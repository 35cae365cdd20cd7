"""The documentation pages the audit's findings point to, as installed.

The pages are the trap pages of the documentation site (`docs/traps/*.md`
and `docs/symptoms.md` in the repository, their one source), shipped in
the wheel as package data under `keras_stable/audit/pages/` (a copy that
`tests/audit/test_pages.py` keeps equal to the source), so that an
installed package can name a page and print it:
`python -m keras_stable.audit --explain norm_at_zero`.
"""

import importlib.resources

EXPLAIN = "python -m keras_stable.audit --explain"


def _pages():
    return importlib.resources.files("keras_stable.audit") / "pages"


def page_names():
    """The shipped pages, by file stem (`"norm-at-zero"`, ...), sorted."""
    return sorted(p.name[: -len(".md")] for p in _pages().iterdir() if p.name.endswith(".md"))


def _page_of(name):
    """The page file of a trap id (`"norm_at_zero"`) or of a page stem
    (`"norm-at-zero"`), or None."""
    from keras_stable.audit.report import TRAPS  # report.py imports this module

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
    return (_pages() / page).read_text(encoding="utf-8")


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
