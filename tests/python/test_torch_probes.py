"""Host tier: the binding's torch fast path (attribute probes instead of DLPack), exercised with a
NumPy-backed stand-in for torch in a subprocess (so no real torch import is affected)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(r"""
    import sys, types
    import numpy as np

    torch = types.ModuleType("torch")

    class dtype:
        def __init__(self, name): self.name = name
        def __repr__(self): return "torch." + self.name

    for n in ["uint8", "int8", "float4_e2m1fn_x2", "float8_e4m3fn", "float8_e8m0fnu", "float16",
              "bfloat16", "float32", "int16", "uint16"]:
        setattr(torch, n, dtype(n))

    class Tensor:
        device = "meta"
        def __init__(self, arr, dt, cpu=True):
            self._a, self._dt, self.is_cpu = arr, dt, cpu
        def data_ptr(self): return self._a.ctypes.data
        @property
        def shape(self): return tuple(self._a.shape)
        def stride(self): return tuple(s // self._a.itemsize for s in self._a.strides)
        @property
        def dtype(self): return self._dt
        is_cuda = False
        def get_device(self): return -1

    torch.Tensor = Tensor
    torch._C = types.ModuleType("torch._C")
    sys.modules["torch"] = torch

    import fp4gemm
    from fp4gemm.testing import random_groups

    d = random_groups([16, 0, 40], 64, 256, "nvfp4", "blocked", seed=3)
    ref = fp4gemm.grouped_gemm(d.a, d.b, d.sfa, d.sfb, scale_layout="blocked")

    T = lambda xs, dt: [Tensor(x, dt) for x in xs]
    c = [np.full_like(x, np.nan) for x in ref]
    args = (T(d.a, torch.float4_e2m1fn_x2), T(d.b, torch.uint8), T(d.sfa, torch.float8_e4m3fn),
            T(d.sfb, torch.uint8), T(c, torch.float16))
    for _ in range(2):  # second call: same objects (memo lookup) on the host path
        fp4gemm._C.grouped_gemm(*args, None, "nvfp4", "blocked", torch.float16, None, None, 0)
        for x, y in zip(c, ref):
            assert np.array_equal(x, y), "torch-probe path differs from the DLPack path"

    def expect(fn, text):
        try:
            fn()
        except ValueError as e:
            assert text in str(e), str(e)
        else:
            raise AssertionError("no error: " + text)

    bad_c = [Tensor(x, torch.bfloat16) for x in c]
    expect(lambda: fp4gemm._C.grouped_gemm(*args[:4], bad_c, None, "nvfp4", "blocked", "float16", None, None, 0),
           "c[0]: has dtype bfloat16 but out_dtype is float16")
    bad_s = T(d.sfa, torch.float8_e8m0fnu)
    expect(lambda: fp4gemm._C.grouped_gemm(args[0], args[1], bad_s, *args[3:], None, "nvfp4", "blocked",
                                           "float16", None, None, 0),
           "nvfp4 scales must be uint8 or float8_e4m3fn")
    meta = [Tensor(x, torch.uint8, cpu=False) for x in d.a]
    expect(lambda: fp4gemm._C.grouped_gemm(meta, *args[1:], None, "nvfp4", "blocked", "float16", None, None, 0),
           "a[0]: is a torch tensor on an unsupported device (meta)")
    print("ok")
""")


def test_torch_probe_path_with_stand_in():
    env = dict(os.environ, FP4GEMM_NO_TORCH="1")
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr
