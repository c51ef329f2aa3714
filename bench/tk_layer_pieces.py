"""triton_kernels' same-run layer benchmark (``tk_layer.py``, unchanged) with fp4gemm's layer on its fast layout.

triton_kernels converts the shared weights into its own Hopper layout once at setup; this runs fp4gemm the same way:
every ``fp4gemm.moe.MoeLayer`` the script builds on rows with linear scales is built instead on a copy packed once
into pieces (``fp4gemm.moe.pack_pieces``) with blocked scales -- what the transformers integration runs by default
(``weight_layout="pieces"``). fp4gemm.moe.fused_experts builds its layers through the same class, so the script's
``fp4gemm_fused`` column runs on pieces too (a copy packed per plan; a grown plan packs another). Everything else
(cases, timing, checks, JSON) is tk_layer.py's.

Usage: python3 bench/tk_layer_pieces.py [path/to/tk_layer.py]  (default: the peers' copy beside triton_kernels on
PYTHONPATH, else ../shared/peers/tk_layer.py); tk_layer.py's environment variables apply.
"""
import os
import runpy
import sys


def _script() -> str:
    if len(sys.argv) > 1:
        return sys.argv[1]
    for d in sys.path + [os.path.join(os.path.dirname(__file__), "..", "..", "shared", "peers")]:
        p = os.path.join(d or ".", "tk_layer.py")
        if os.path.isfile(p):
            return p
    sys.exit("tk_layer_pieces: tk_layer.py not found (pass its path)")


def main() -> None:
    import fp4gemm.moe as moe
    from fp4gemm.integrations.transformers import _packed

    rows_layer = moe.MoeLayer

    class PiecesLayer(rows_layer):
        def __init__(self, w13, w13_scales, w2, w2_scales, **kw):
            if kw.get("weight_layout", "rows") == "rows" and kw.get("scale_layout", "blocked") == "linear":
                fmt = "nvfp4" if str(kw.get("act_format", "nvfp4")) == "nvfp4" else "mxfp4"  # (MoeLayer's default)
                gate_up = kw.get("gate_up") or ("interleaved" if kw.get("activation") == "swigluoai" else "stacked")
                packed = _packed(w13, w13_scales, w2, w2_scales, gate_up, fmt)
                self._fp4gemm_packed = packed  # the copy lives as long as the layer
                w13, w13_scales, w2, w2_scales = packed
                kw.update(scale_layout="blocked", weight_layout="pieces")
            super().__init__(w13, w13_scales, w2, w2_scales, **kw)

    moe.MoeLayer = PiecesLayer
    print("tk_layer_pieces: fp4gemm's MoeLayer runs on weights packed once into pieces with blocked scales", flush=True)
    path = _script()
    sys.argv = [path]
    runpy.run_path(path, run_name="__main__")


if __name__ == "__main__":
    main()
