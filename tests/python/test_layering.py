"""Host tier: the include directions of src/ (docs/DESIGN.md, "Source layout").

- src/device/ (kernel parts) includes no host code: nothing under src/host/.
- src/kernels/ (kernels and their launches) includes no host code either: checks, plans and public
  entry points live in src/host/ and call the launches through the registry.
- src/host/ reaches the kernels only through the kernel registry (host/kernel_registry.{hpp,cpp}).
- The host-only layers (src/formats/, src/reference/*.cpp, src/host/core/) include neither kernels nor
  kernel parts' .cuh files.
"""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
REGISTRY = {"host/kernel_registry.hpp", "host/kernel_registry.cpp"}


def _includes(root: Path):
    """(file relative to root, included path) for every quoted include under root."""
    for f in sorted(root.rglob("*")):
        if f.suffix in {".hpp", ".cpp", ".cu", ".cuh", ".h"}:
            for inc in INCLUDE.findall(f.read_text(errors="replace")):
                yield f.relative_to(root).as_posix(), inc


def violations(root: Path) -> list[str]:
    bad = []
    for f, inc in _includes(root):
        if f.startswith("device/") and inc.startswith("host/"):
            bad.append(f"{f} includes {inc}: device parts include no host code")
        if f.startswith("kernels/") and inc.startswith("host/"):
            bad.append(f"{f} includes {inc}: kernels include no host code")
        if f.startswith("host/") and inc.startswith("kernels/") and f not in REGISTRY:
            bad.append(f"{f} includes {inc}: host code reaches kernels only through the registry")
        host_only = f.startswith(("formats/", "host/core/")) or (f.startswith("reference/") and f.endswith(".cpp"))
        if host_only and (inc.startswith("kernels/") or inc.endswith(".cuh")):
            bad.append(f"{f} includes {inc}: host-only code includes no kernels or device .cuh files")
    return bad


def test_src_include_directions():
    found = list(_includes(SRC))
    assert len(found) > 100, f"only {len(found)} includes found under {SRC}: wrong root?"
    assert violations(SRC) == []


def test_checker_sees_each_rule(tmp_path):
    """The checker fails on one file breaking each rule (so the test above can fail)."""
    for rel, text in {
        "device/part.cuh": '#include "host/plan.hpp"\n',
        "host/moe_layer.cpp": '#include "kernels/decode_layer.hpp"\n',
        "host/core/schedule.cpp": '#include "device/mainloop.cuh"\n',
        "host/kernel_registry.cpp": '#include "kernels/sm90/fused_launch.hpp"\n',  # allowed
        "kernels/routing.cu": '#include "host/core/validate.hpp"\n',
    }.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    bad = violations(tmp_path)
    assert len(bad) == 4, bad
    assert any(b.startswith("device/part.cuh") for b in bad)
    assert any(b.startswith("host/moe_layer.cpp") for b in bad)
    assert any(b.startswith("host/core/schedule.cpp") for b in bad)
    assert any(b.startswith("kernels/routing.cu") for b in bad)
