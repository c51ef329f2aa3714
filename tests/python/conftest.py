"""Two tiers: host tests (NumPy only, run everywhere) and GPU tests (torch + CUDA), which skip
visibly where they cannot run, with the reason saying what is missing (torch, a CUDA build of
torch, or a CUDA device); run pytest with -rs to list them.

The GPU tier runs backend 'auto' (the fast kernel) wherever fp4gemm has a fast kernel for the GPU:
a failing fast kernel fails the tests. Only on a GPU without one does it run the reference
backend, and then says so in the report header and the summary (FP4GEMM_TEST_BACKEND forces a
backend)."""

from __future__ import annotations

import gc
import importlib.util
import os

import pytest


def _gpu_tier_missing():
    """Why the GPU tier cannot run here, naming what is missing; None when it can."""
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed (the GPU tier needs torch and a CUDA device)"
    import torch

    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU-only build (the GPU tier needs a CUDA build of torch)"
    if not torch.cuda.is_available():
        return "no CUDA device (torch.cuda.is_available() is False)"
    return None


_GPU_SKIP = _gpu_tier_missing()
_BACKEND_NOTE = []  # the GPU tier's backend choice, printed in the summary


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "gpu" in item.keywords and _GPU_SKIP:
            item.add_marker(pytest.mark.skip(reason=_GPU_SKIP))


def pytest_sessionfinish(session, exitstatus):
    # Collect reference cycles (e.g. a test frame <-> the pytest.raises ExceptionInfo holding its traceback)
    # before the interpreter exits, so nanobind's leak check at exit reports only what reference counting leaks.
    gc.collect()


def pytest_terminal_summary(terminalreporter):
    for line in _BACKEND_NOTE:
        terminalreporter.write_sep("=", line, yellow=True, bold=True)


def select_backend(info, forced=None):
    """(backend, note) for the GPU tier on a device described by fp4gemm.device_info(): `forced`
    when given, else 'auto' wherever fp4gemm has a fast kernel (no fallback: a failing fast kernel
    must fail the tests), else 'reference' with a note saying the fast kernel went untested."""
    if forced:
        return forced, f"fp4gemm GPU tier: backend {forced!r} (FP4GEMM_TEST_BACKEND)"
    if info["has_fast_kernel"]:
        return "auto", None
    return "reference", (f"fp4gemm GPU tier: {info['name']} (sm_{info['sm'][0]}{info['sm'][1]}) has no fast "
                         "kernel; the GPU tests ran the REFERENCE backend, the fast kernel was not tested")


@pytest.fixture(scope="session")
def backend(request):
    """The backend the GPU tests run (see select_backend); a note about it is printed at once
    and again in the summary."""
    import fp4gemm

    choice, note = select_backend(fp4gemm.device_info(), os.environ.get("FP4GEMM_TEST_BACKEND"))
    fp4gemm.set_default_backend(choice)
    if note:
        _BACKEND_NOTE.append(note)
        reporter = request.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line("\n" + note, yellow=True, bold=True)
    return choice


@pytest.fixture
def d():
    """Two small NVFP4 groups (M = 16, 32; N = 64; K = 128) for the argument-checking tests."""
    from fp4gemm.testing import random_groups

    return random_groups([16, 32], 64, 128, seed=0)


@pytest.fixture(scope="module")
def release_pinned_plans():
    """For modules whose graphs pin plans in the caches: once the module's graphs are gone, the
    pinned plans are released, so later modules start from empty caches."""
    yield
    import gc
    import sys

    import fp4gemm

    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.synchronize()
    fp4gemm.clear_plan_cache(pinned=True)
