"""Host tier with torch (CPU tensors run the CPU reference): the MoE custom ops, their fake
implementations under torch.compile(fullgraph=True) with a changing routing, opcheck, and
align_routing on torch tensors. Skipped where torch is not installed."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (these host tests use CPU torch tensors)")

import fp4gemm  # noqa: E402
from fp4gemm import moe, ops  # noqa: E402
from fp4gemm.testing import random_moe, random_topk  # noqa: E402


def _t(x):
    return torch.from_numpy(np.ascontiguousarray(x))


@pytest.fixture
def problem():
    d = random_moe(8, 32, 64, 10, 2, seed=1)
    return d, [_t(x) for x in (d.a, d.a_scales, d.w, d.w_scales, d.offsets, d.gather)]


def test_op_matches_reference(problem):
    d, (a, sa, w, ws, off, g) = problem
    out = ops.moe_grouped_gemm(a, sa, w, ws, off, g, out_dtype=torch.float32)
    assert out.shape == (20, 32) and out.dtype == torch.float32
    np.testing.assert_array_equal(out.numpy(), d.reference())
    out2 = torch.full((20, 32), float("nan"))
    ops.moe_grouped_gemm_out(a, sa, w, ws, off, out2, g, alpha=0.5)
    np.testing.assert_array_equal(out2.numpy(), d.reference() * 0.5)


def test_compile_fullgraph_with_changing_routing(problem):
    """One compiled graph (aot_eager: the fake implementation traces it) serves every routing: the
    offsets and gather index are tensors whose contents change between calls."""
    d, (a, sa, w, ws, off, g) = problem

    def fn(a, sa, w, ws, off, g):
        return ops.moe_grouped_gemm(a, sa, w, ws, off, g, out_dtype=torch.float32) * 2.0 + 1.0

    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    rng = np.random.default_rng(2)
    for routing in ["uniform", "one-hot", "skewed", "balanced"]:
        d.offsets, d.gather, _ = moe.align_routing(random_topk(rng, 10, 8, 2, routing), 8)
        off.copy_(_t(d.offsets))
        g.copy_(_t(d.gather))
        np.testing.assert_array_equal(compiled(a, sa, w, ws, off, g).numpy(), d.reference() * 2.0 + 1.0)


def test_opcheck(problem):
    _, (a, sa, w, ws, off, g) = problem
    torch.library.opcheck(torch.ops.fp4gemm.moe_grouped_gemm.default,
                          (a, sa, w, ws, off, g, None, None, "", "blocked", torch.float32))


def test_align_routing_torch_matches_numpy():
    ids = random_topk(np.random.default_rng(3), 33, 16, 4, "skewed")
    got = moe.align_routing(torch.from_numpy(ids), 16)
    want = moe.align_routing(ids, 16)
    for x, y in zip(got, want):
        np.testing.assert_array_equal(x.numpy(), y)
    assert got[0].dtype == torch.int32 and got[1].dtype == torch.int32


def test_moegemm_on_cpu_tensors_checks_weights_unchanged(problem):
    d, (a, sa, w, ws, off, g) = problem
    gm = moe.MoeGemm(w, ws, capacity=20, out_dtype="float32")
    np.testing.assert_array_equal(gm.run(a, sa, off, gather_index=g).numpy(), d.reference())
    w.set_(w.clone())  # new storage under the same tensor object
    with pytest.raises(fp4gemm.ArgumentError, match="w: changed since this MoeGemm was built"):
        gm.run(a, sa, off, gather_index=g)
