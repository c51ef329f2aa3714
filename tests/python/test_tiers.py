"""Host tier: the test tiers report honestly what they ran and why they skipped."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

import conftest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed here")
def test_skip_reason_names_torch_when_torch_is_missing():
    """Without torch the GPU tier used to be skipped as "no CUDA device": say what is missing."""
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                          "tests/python/test_gpu.py", "tests/python/test_readme.py::test_readme_gpu_example"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300).stdout
    skips = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    assert skips, out
    for line in skips:
        assert "torch is not installed" in line and "no CUDA device" not in line, line


def test_gpu_tier_missing_reason():
    if importlib.util.find_spec("torch") is None:
        assert conftest._gpu_tier_missing().startswith("torch is not installed")


FAST = {"name": "NVIDIA H200", "sm": (9, 0), "has_fast_kernel": True}
SLOW = {"name": "NVIDIA A100", "sm": (8, 0), "has_fast_kernel": False}


def test_fast_gpu_never_falls_back_to_the_reference():
    """The fixture used to switch the whole tier to the reference backend on any DeviceError of
    the fast kernel, with a warning only: a broken fast kernel passed."""
    assert conftest.select_backend(FAST) == ("auto", None)


def test_gpu_without_fast_kernel_runs_the_reference_visibly():
    backend, note = conftest.select_backend(SLOW)
    assert backend == "reference"
    assert "NVIDIA A100 (sm_80) has no fast kernel" in note and "not tested" in note


def test_forced_backend():
    assert conftest.select_backend(FAST, "reference")[0] == "reference"


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None,
                    reason="torch is installed here (fp4gemm.ops registered the C++ kernels at import; the GPU "
                           "tier's test_torch_op_runs_the_native_kernel checks them)")
def test_torch_native_kernels_say_why_not_without_torch():
    """Without torch loaded the C++ torch kernels (python/src/torch_native.cpp) register nothing and
    say why, per op, and nothing ran through them."""
    from fp4gemm import _fp4gemm as C

    cache = C.FusedExpertsCache()
    status = C._register_torch_native(str(ROOT / "no-such-torch" / "lib"), cache)
    assert set(status) == {"fused_experts", "moe_grouped_gemm", "moe_grouped_gemm_out", "grouped_gemm",
                           "grouped_gemm_out"}
    for op, why in status.items():
        assert why == "libtorch_cpu.so is not loaded", (op, why)
    assert C._torch_native_counts() == (0, 0)
    assert C._torch_native_forwarding() is False
    del cache  # (the registration forgets it)
