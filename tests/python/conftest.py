"""Two tiers: host tests (NumPy only, run everywhere) and GPU tests (torch + CUDA), which skip
visibly with the reason "no CUDA device" where there is none (run pytest with -rs to list them)."""

from __future__ import annotations

import importlib.util
import os

import pytest


def _cuda_reason():
    if importlib.util.find_spec("torch") is None:
        return "no CUDA device (torch is not installed)"
    import torch

    if not torch.cuda.is_available():
        return "no CUDA device"
    return None


_GPU_SKIP = _cuda_reason()


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "gpu" in item.keywords and _GPU_SKIP:
            item.add_marker(pytest.mark.skip(reason=_GPU_SKIP))


@pytest.fixture(scope="session")
def backend():
    """The backend the GPU tests run: FP4GEMM_TEST_BACKEND, else 'auto' when the fast kernel
    exists on this GPU, else 'reference' (reported as a warning)."""
    import warnings

    import fp4gemm

    want = os.environ.get("FP4GEMM_TEST_BACKEND")
    if want:
        fp4gemm.set_default_backend(want)
        return want
    import torch

    from fp4gemm import gpumode, torch_utils

    data = torch_utils.gpumode_input([128], [128], [256], seed=1)
    try:
        fp4gemm.set_default_backend("auto")
        gpumode.custom_kernel(data)
        torch.cuda.synchronize()
        return "auto"
    except fp4gemm.DeviceError as e:
        warnings.warn(f"backend 'auto' unavailable ({e}); GPU tests run the reference backend")
        fp4gemm.set_default_backend("reference")
        return "reference"


@pytest.fixture
def d():
    """Two small NVFP4 groups (M = 16, 32; N = 64; K = 128) for the argument-checking tests."""
    from fp4gemm.testing import random_groups

    return random_groups([16, 32], 64, 128, seed=0)
