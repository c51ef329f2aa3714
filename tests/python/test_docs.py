"""Host tier: the example of docs/PYTHON.md marked `<!-- tested: host -->` runs as written."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "PYTHON.md"


def _doc_blocks():
    text = DOC.read_text()
    return re.findall(r"<!-- tested: host -->\s*```python\n(.*?)```", text, flags=re.S)


def test_doc_example_runs():
    blocks = _doc_blocks()
    assert blocks, f"no tested block in {DOC}"
    for code in blocks:
        exec(compile(code, str(DOC), "exec"), {"__name__": "doc_example"})
