"""The usage example of README.md runs as written.

README.md marks its tested code blocks with an HTML comment directly before the fence:

    <!-- tested: tests/python/test_readme.py host -->   NumPy only: runs everywhere (host tier)
    <!-- tested: tests/python/test_readme.py gpu -->    torch + CUDA: GPU tier, skipped visibly
                                                         (naming what is missing) where it cannot run

The blocks are one program: a gpu block runs after the host blocks, in the same namespace (it
uses their arrays). The examples assert their results, so a wrong result fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
MARK = "tests/python/test_readme.py"
_BLOCK = re.compile(r"<!-- tested: " + re.escape(MARK) + r" (\w+) -->\n```python\n(.*?)^```", re.S | re.M)


def _blocks(tier: str):
    """(first line number, code) of README's tested blocks of one tier, in document order."""
    text = README.read_text(encoding="utf-8")
    out = []
    for m in _BLOCK.finditer(text):
        if m.group(1) == tier:
            out.append((text.count("\n", 0, m.start(2)) + 1, m.group(2)))
    return out


def _run(blocks, namespace):
    for line, code in blocks:
        # Pad with newlines so that tracebacks point at README.md's own line numbers.
        exec(compile("\n" * (line - 1) + code, str(README), "exec"), namespace)


def test_readme_marks_are_well_formed():
    text = README.read_text(encoding="utf-8")
    marks = re.findall(r"<!-- tested: " + re.escape(MARK) + r"[^>]*-->", text)
    tiers = [m.group(1) for m in _BLOCK.finditer(text)]
    assert len(marks) == len(tiers), "a tested mark is not directly followed by a ```python block"
    assert set(tiers) <= {"host", "gpu"}, tiers
    assert "host" in tiers and "gpu" in tiers, "README.md lost its tested host or GPU example"
    for tier in ("host", "gpu"):
        for _, code in _blocks(tier):
            assert "assert" in code, f"a tested {tier} block checks nothing"


def test_readme_host_example():
    _run(_blocks("host"), {"__name__": "readme_example"})


def test_readme_host_example_can_fail(monkeypatch):
    """The example checks its result: a wrong grouped_gemm result makes it fail."""
    import fp4gemm

    real = fp4gemm.grouped_gemm

    def wrong(*args, **kwargs):
        c = real(*args, **kwargs)
        for t in c:
            if t.size:
                t.flat[t.size // 2] += 1  # one element off
        return c

    monkeypatch.setattr(fp4gemm, "grouped_gemm", wrong)
    with pytest.raises(AssertionError):
        _run(_blocks("host"), {"__name__": "readme_example"})


@pytest.mark.gpu
def test_readme_gpu_example(backend):
    pytest.importorskip("torch", reason="torch is not installed (the GPU tier needs torch and a CUDA device)")
    import torch

    namespace = {"__name__": "readme_example"}
    _run(_blocks("host") + _blocks("gpu"), namespace)
    torch.cuda.synchronize()
    assert all(t.is_cuda for t in namespace["c_gpu"])
