"""`--format json`: the versioned findings document (see `graphready.findings.report_to_json`)."""

from __future__ import annotations

import json

from graphready.findings import report_to_json
from graphready.output.document import Document


def render(doc: Document) -> str:
    data = report_to_json(doc.findings, doc.summary, units=doc.units, tool=doc.tool, root=doc.root, run=doc.run)
    return json.dumps(data, indent=2, sort_keys=False) + "\n"
