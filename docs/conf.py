"""Sphinx configuration of the trainspec docs (MyST Markdown, the furo theme).

Build with warnings as errors, after regenerating the spec pages from the clause registry::

    python -m trainspec.conformance.report.specdocs docs/spec
    python -m sphinx -W --keep-going -b html docs docs/_build/html
"""

from pathlib import Path

from trainspec import __version__

project = "trainspec"
author = "trainspec developers"
copyright = "trainspec developers"
release = version = __version__

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".md": "markdown"}
root_doc = "index"
# spec-outline.md is the authors' working outline (the spec pages are written from it), and
# matrix.md is what `trainspec matrix --out docs` writes next to matrix.json: neither is a page
exclude_patterns = ["_build", "spec-outline.md", "matrix.md", "matrix.json"]
# the published matrix's static page, copied beside the pages (frameworks.md links to it)
html_extra_path = [name for name in ("matrix.html",) if (Path(__file__).parent / name).exists()]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# the API page documents the package itself: nothing is mocked, it must import
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "furo"
html_title = f"trainspec {release}"
