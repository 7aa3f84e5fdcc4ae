"""Where a clause is documented: the link a report gives next to a clause that does not pass.

Pure: the template comes from the caller (the CLI and the pytest plugin read the environment
variable :data:`DOCS_URL_ENV` once and put it in the plan), never from ``os.environ`` here.
"""

from __future__ import annotations

from trainspec.conformance.spec import clauses as registry

__all__ = ["DOCS_URL", "DOCS_URL_ENV", "docs_link"]

# Where a clause is documented: ``{family}`` (lower case, the page) and ``{anchor}`` (the
# clause's lower-case ID) are filled in. The project has no public URL yet, so the default is
# the spec pages' path in the trainspec repository.
DOCS_URL = "docs/spec/{family}.md#{anchor}"
# The environment variable users set to override DOCS_URL: a template with {family} and
# {anchor}, or the base URL of the built site, e.g. https://example.org/trainspec/spec, which
# gives .../spec/res.html#res-3. Read by the entry points only.
DOCS_URL_ENV = "TRAINSPEC_DOCS_URL"


def docs_link(clause_id: str, template: str | None = None) -> str:
    """Where a clause is documented, e.g. ``docs/spec/res.md#res-3``.

    ``template`` is :data:`DOCS_URL`'s form, or a base URL (no ``{anchor}``): the pages of the
    built HTML site under it. None or blank means :data:`DOCS_URL`.
    """
    chosen = (template or "").strip() or DOCS_URL
    if "{anchor}" not in chosen:  # a base URL: the pages of the built (HTML) site under it
        chosen = chosen.rstrip("/") + "/{family}.html#{anchor}"
    clause = registry.get(clause_id)
    return chosen.replace("{family}", clause.family.lower()).replace("{anchor}", clause.anchor)
