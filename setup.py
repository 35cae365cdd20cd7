"""One build step on top of setup.cfg (which declares everything else).

The pages that `python -m keras_stable.audit --explain` prints are the
documentation's own (`docs/symptoms.md` and `docs/traps/*.md`, their one
source): `build_py` copies them into the built package as
`keras_stable/audit/pages/symptoms.md` and `keras_stable/audit/pages/traps/*.md`,
so a wheel, `pip install .` and an sdist's wheel (MANIFEST.in ships docs/)
carry them. An editable install copies nothing: `keras_stable/audit/pages.py`
reads `docs/` next to the package.
"""

import glob
import os

from setuptools import setup
from setuptools.command.build_py import build_py

PAGES = os.path.join("keras_stable", "audit", "pages")


def trap_pages():
    """[(source, path under the package root)] of the pages to ship."""
    sources = [os.path.join("docs", "symptoms.md"), *sorted(glob.glob("docs/traps/*.md"))]
    if not os.path.isfile(sources[0]) or len(sources) < 2:
        raise FileNotFoundError(
            "docs/symptoms.md and docs/traps/*.md are missing: the audit's pages "
            "are built from them (an sdist ships them through MANIFEST.in)"
        )
    return [(source, os.path.join(PAGES, os.path.relpath(source, "docs"))) for source in sources]


class BuildPyWithPages(build_py):
    def run(self):
        super().run()
        if self.editable_mode:
            return
        for source, target in trap_pages():
            target = os.path.join(self.build_lib, target)
            self.mkpath(os.path.dirname(target))
            self.copy_file(source, target, preserve_mode=False)

    def get_outputs(self, include_bytecode=True):
        outputs = super().get_outputs(include_bytecode)
        if self.editable_mode:
            return outputs
        return [*outputs, *(os.path.join(self.build_lib, t) for _, t in trap_pages())]


setup(cmdclass={"build_py": BuildPyWithPages})
