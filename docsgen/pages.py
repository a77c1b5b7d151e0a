"""The mkdocs-gen-files script (mkdocs.yml, plugin `gen-files`): writes the generated
reference pages into the site at build time, so they are never stale and never edited by
hand. Run by `mkdocs build` / `mkdocs serve` from the repository's root."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import mkdocs_gen_files

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # mkdocs runs this file as a script: import this checkout
    sys.path.insert(0, str(ROOT))

from docsgen import api, cli, configuration, errors, queue_options


def write(page: str, text: str) -> None:
    with mkdocs_gen_files.open(page, "w") as out:
        out.write(text)


document = api.document()
write(api.API_PAGE, api.render_api(document))
write(api.SCHEMAS_PAGE, api.render_schemas(document))
write("reference/openapi.json", json.dumps(document, indent=1) + "\n")
write(cli.PAGE, cli.render_cli())
write(configuration.PAGE, configuration.render_configuration())
write(errors.PAGE, errors.render_errors())
write(queue_options.PAGE, queue_options.render_queue_options())
