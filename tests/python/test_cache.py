"""Host tier: the plan cache's limits and concurrent callers. (Plans exist only for CUDA arrays;
the GPU tier checks the byte bound and the memo under eviction and concurrency, test_gpu.py.)"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import fp4gemm
from fp4gemm.testing import numpy_reference, random_groups, round_to


def test_byte_bound_setting():
    """The cache is bounded by the device memory its plans hold, not only by their count: 1 GiB
    unless set (64 plans of a large MoE shape used to pin tens of GB)."""
    fp4gemm.clear_plan_cache(pinned=True)  # (plans an earlier test's graphs pinned; those graphs are gone)
    info = fp4gemm.plan_cache_info()
    assert info["max_bytes"] == 1 << 30 and info["bytes"] == 0
    try:
        fp4gemm.set_plan_cache_max_bytes(256 << 20)
        assert fp4gemm.plan_cache_info()["max_bytes"] == 256 << 20
        with pytest.raises(TypeError):
            fp4gemm.set_plan_cache_max_bytes(-1)
    finally:
        fp4gemm.set_plan_cache_max_bytes(1 << 30)
    with pytest.raises(fp4gemm.ArgumentError, match="capacity: must be at least 1"):
        fp4gemm.set_plan_cache_capacity(0)


def test_concurrent_host_callers():
    """Threads computing on the host (the reference releases the GIL) while another changes and
    reads the caches: every result right, no crash. A regression guard for the locking; the
    memo itself (CUDA tensors only) is exercised under threads in test_gpu.py."""
    problems = [random_groups([8 * (t + 1), 16], 32, 128, seed=t) for t in range(4)]
    refs = [[round_to(r) for r in numpy_reference(d)] for d in problems]
    errors, stop = [], threading.Event()

    def worker(d, ref):
        try:
            for _ in range(30):
                c = fp4gemm.grouped_gemm(d.a, d.b, d.sfa, d.sfb, d.outputs())
                for out, want in zip(c, ref):
                    np.testing.assert_array_equal(out.astype(np.float64), want)
        except BaseException as e:  # noqa: BLE001  (reported below)
            errors.append(e)

    def churn():
        while not stop.is_set():
            fp4gemm.clear_plan_cache()
            fp4gemm.set_plan_cache_capacity(1)
            fp4gemm.plan_cache_info()
            fp4gemm.set_plan_cache_capacity(64)

    side = threading.Thread(target=churn)
    side.start()
    threads = [threading.Thread(target=worker, args=p) for p in zip(problems, refs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    side.join()
    assert not errors, errors
