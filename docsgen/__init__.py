"""Pages of the documentation site generated from the code at build time.

Each module renders one reference page as Markdown from what the broker itself uses: the
route table's OpenAPI document (`api`), the settings and their meanings (`configuration`),
the error classes and the refusal codes raised in the code (`errors`). `pages` is the
mkdocs-gen-files script that writes them into the site; tests import the renderers.
"""
