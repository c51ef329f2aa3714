"""Host tier: fp4gemm.moe.ExpertWeights from small synthetic checkpoints (ModelOpt NVFP4,
gpt-oss MXFP4), written with safetensors where it is installed, as plain dicts everywhere.
Loading only rearranges bytes: every test compares the loaded arrays with the checkpoint's own
nibbles and codes, and the dequantised experts with the dequantised checkpoint tensors."""

from __future__ import annotations

import numpy as np
import pytest

import fp4gemm
from fp4gemm import formats
from fp4gemm.moe import ExpertWeights


def _nvfp4_linear(rng, n, k):
    w = rng.integers(0, 256, size=(n, k // 2), dtype=np.uint8)
    s = rng.integers(0x08, 0x7F, size=(n, k // 16), dtype=np.uint8)  # normal E4M3 codes
    return w, s


def _modelopt(rng, experts, hidden, inter, names=("w1", "w3", "w2"), prefix="model.layers.0.mlp.", distinct_g=True):
    sd, truth = {}, []
    gate, up, down = names
    for e in range(experts):
        base = f"{prefix}experts.{e}."
        parts = {}
        for name, (n, k) in ((gate, ((2 if up is None else 1) * inter, hidden)), (down, (hidden, inter))) + (
                ((up, (inter, hidden)),) if up is not None else ()):
            w, s = _nvfp4_linear(rng, n, k)
            g = np.float32(rng.uniform(1e-4, 1e-2)) if distinct_g or name == down else np.float32(1e-3)
            sd[base + name + ".weight"] = w
            sd[base + name + ".weight_scale"] = s
            sd[base + name + ".weight_scale_2"] = np.array([g], dtype=np.float32)
            sd[base + name + ".input_scale"] = np.array([0.25 if name != down else 0.5], dtype=np.float32)
            parts[name] = (w, s, g)
        truth.append(parts)
    return sd, truth


def _check_modelopt(ew, truth, names, experts, hidden, inter):
    gate, up, down = names
    assert (ew.format, ew.experts, ew.hidden, ew.intermediate) == ("nvfp4", experts, hidden, inter)
    assert ew.w13.shape == (experts, 2 * inter, hidden // 2) and ew.w2.shape == (experts, hidden, inter // 2)
    for e, parts in enumerate(truth):
        wg, sg, gg = parts[gate]
        if up is not None:
            wu, su, gu = parts[up]
            np.testing.assert_array_equal(ew.w13[e], np.concatenate([wg, wu]))
            lin = np.concatenate([sg, su])
            np.testing.assert_array_equal(ew.w13_global[e], [gg, gu])
        else:
            np.testing.assert_array_equal(ew.w13[e], wg)
            lin = sg
            np.testing.assert_array_equal(ew.w13_global[e], [gg, gg])
        np.testing.assert_array_equal(formats.blocked_to_linear(ew.w13_scales[e], 2 * inter, hidden // 16), lin)
        wd, sdn, gd = parts[down]
        np.testing.assert_array_equal(ew.w2[e], wd)
        np.testing.assert_array_equal(formats.blocked_to_linear(ew.w2_scales[e], hidden, inter // 16), sdn)
        assert ew.w2_global[e] == gd
        # dequantised: the loaded (blocked) expert equals the checkpoint's tensors
        got = formats.dequantize(ew.w13[e], ew.w13_scales[e], "nvfp4", "blocked", hidden)
        np.testing.assert_array_equal(got, formats.dequantize(ew.w13[e], lin, "nvfp4", "linear"))
    np.testing.assert_array_equal(ew.w13_input_scale, np.full(experts, 0.25, np.float32))
    np.testing.assert_array_equal(ew.w2_input_scale, np.full(experts, 0.5, np.float32))


@pytest.mark.parametrize("names", [("w1", "w3", "w2"), ("gate_proj", "up_proj", "down_proj"), ("gate_up_proj", None, "down_proj")])
def test_modelopt_nvfp4_dict(names):
    rng = np.random.default_rng(1)
    experts, hidden, inter = 4, 256, 128
    sd, truth = _modelopt(rng, experts, hidden, inter, names)
    ew = ExpertWeights.from_modelopt(sd, "model.layers.0.mlp.")
    _check_modelopt(ew, truth, names, experts, hidden, inter)
    assert ew.source["gate"] == names[0]


def test_modelopt_nvfp4_safetensors_file(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy", reason="safetensors is not installed")
    rng = np.random.default_rng(2)
    experts, hidden, inter = 3, 128, 256
    sd, truth = _modelopt(rng, experts, hidden, inter)
    # (ModelOpt's files hold weight_scale as F8_E4M3, which safetensors.numpy cannot represent;
    # safetensors.torch reads them as torch.float8_e4m3fn, which the loader takes as codes.)
    path = tmp_path / "layer.safetensors"
    sd["model.layers.0.mlp.gate.weight"] = np.zeros((experts, hidden), np.float32)  # a router: not an expert
    safetensors_numpy.save_file(sd, str(path))
    ew = ExpertWeights.from_modelopt(safetensors_numpy.load_file(str(path)), "model.layers.0.mlp.")
    _check_modelopt(ew, truth, ("w1", "w3", "w2"), experts, hidden, inter)


def test_modelopt_errors_name_the_tensor():
    rng = np.random.default_rng(3)
    sd, _ = _modelopt(rng, 2, 128, 128)
    with pytest.raises(fp4gemm.ArgumentError, match="has no experts"):
        ExpertWeights.from_modelopt(sd, "model.layers.1.mlp.")
    bad = dict(sd)
    del bad["model.layers.0.mlp.experts.1.w2.weight_scale_2"]
    with pytest.raises(fp4gemm.ArgumentError, match="experts.1.w2.weight_scale_2"):
        ExpertWeights.from_modelopt(bad, "model.layers.0.mlp.")
    bad = dict(sd)
    bad["model.layers.0.mlp.experts.0.w3.input_scale"] = np.array([0.125], np.float32)
    with pytest.raises(fp4gemm.ArgumentError, match="input_scale"):
        ExpertWeights.from_modelopt(bad, "model.layers.0.mlp.")
    bad = dict(sd)
    bad["model.layers.0.mlp.experts.0.w1.weight_scale"] = bad["model.layers.0.mlp.experts.0.w1.weight_scale"][:, :4]
    with pytest.raises(fp4gemm.ArgumentError, match=r"do not match NVFP4"):
        ExpertWeights.from_modelopt(bad, "model.layers.0.mlp.")


def _gpt_oss(rng, experts, hidden, inter, prefix="model.layers.0.mlp."):
    p = f"{prefix}experts."
    return {
        p + "gate_up_proj_blocks": rng.integers(0, 256, size=(experts, 2 * inter, hidden // 32, 16), dtype=np.uint8),
        p + "gate_up_proj_scales": rng.integers(117, 138, size=(experts, 2 * inter, hidden // 32), dtype=np.uint8),
        p + "gate_up_proj_bias": rng.standard_normal((experts, 2 * inter)).astype(np.float32),
        p + "down_proj_blocks": rng.integers(0, 256, size=(experts, hidden, inter // 32, 16), dtype=np.uint8),
        p + "down_proj_scales": rng.integers(117, 138, size=(experts, hidden, inter // 32), dtype=np.uint8),
        p + "down_proj_bias": rng.standard_normal((experts, hidden)).astype(np.float32),
    }


@pytest.mark.parametrize("via_file", [False, True])
def test_gpt_oss_mxfp4(tmp_path, via_file):
    rng = np.random.default_rng(4)
    experts, hidden, inter = 4, 128, 64
    sd = _gpt_oss(rng, experts, hidden, inter)
    if via_file:
        safetensors_numpy = pytest.importorskip("safetensors.numpy", reason="safetensors is not installed")
        path = tmp_path / "gpt_oss_layer.safetensors"
        safetensors_numpy.save_file(sd, str(path))
        sd = safetensors_numpy.load_file(str(path))
    ew = ExpertWeights.from_mxfp4(sd, "model.layers.0.mlp.")
    p = "model.layers.0.mlp.experts."
    assert (ew.format, ew.experts, ew.hidden, ew.intermediate, ew.interleaved) == ("mxfp4", experts, hidden, inter, True)
    for e in range(experts):
        np.testing.assert_array_equal(ew.w13[e], sd[p + "gate_up_proj_blocks"][e].reshape(2 * inter, hidden // 2))
        np.testing.assert_array_equal(formats.blocked_to_linear(ew.w13_scales[e], 2 * inter, hidden // 32),
                                      sd[p + "gate_up_proj_scales"][e])
        np.testing.assert_array_equal(ew.w2[e], sd[p + "down_proj_blocks"][e].reshape(hidden, inter // 2))
        np.testing.assert_array_equal(formats.blocked_to_linear(ew.w2_scales[e], hidden, inter // 32),
                                      sd[p + "down_proj_scales"][e])
        # gpt-oss's own dequantisation: block j of row r holds elements 32j..32j+31, low nibble first
        blocks = sd[p + "gate_up_proj_blocks"][e]
        nib = np.stack([blocks & 0x0F, blocks >> 4], axis=-1).reshape(2 * inter, hidden)
        lut = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float64)
        want = lut[nib] * np.exp2(np.repeat(sd[p + "gate_up_proj_scales"][e].astype(np.float64) - 127, 32, axis=1))
        got = formats.dequantize(ew.w13[e], ew.w13_scales[e], "mxfp4", "blocked", hidden)
        np.testing.assert_array_equal(got.astype(np.float64), want)
    np.testing.assert_array_equal(ew.w13_bias, sd[p + "gate_up_proj_bias"])
    np.testing.assert_array_equal(ew.w2_bias, sd[p + "down_proj_bias"])


def test_gpt_oss_errors():
    rng = np.random.default_rng(5)
    sd = _gpt_oss(rng, 2, 64, 64)
    with pytest.raises(fp4gemm.ArgumentError, match="gate_up_proj_blocks"):
        ExpertWeights.from_mxfp4(sd, "model.layers.9.mlp.")
    bad = dict(sd)
    bad["model.layers.0.mlp.experts.down_proj_scales"] = bad["model.layers.0.mlp.experts.down_proj_scales"][:, :, :1]
    with pytest.raises(fp4gemm.ArgumentError, match="down_proj"):
        ExpertWeights.from_mxfp4(bad, "model.layers.0.mlp.")


def test_gpt_oss_layer_from_the_checkpoint_matches_a_numpy_layer():
    """ExpertWeights.from_mxfp4(...).layer(): gpt-oss's layer as the checkpoint describes it (W4A16,
    swigluoai on interleaved gate / up, both biases), on the host, against a float64 NumPy layer
    built from gpt-oss's own dequantisation of the blocks."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf16 = ml_dtypes.bfloat16
    rng = np.random.default_rng(8)
    experts, hidden, inter, k, t = 4, 128, 64, 2, 5
    sd = _gpt_oss(rng, experts, hidden, inter)
    p = "model.layers.0.mlp.experts."
    ew = ExpertWeights.from_mxfp4(sd, "model.layers.0.mlp.")
    layer = ew.layer(max_tokens=8, topk=k)
    assert layer.on_host
    x = rng.standard_normal((t, hidden)).astype(np.float32).astype(bf16)
    ids = np.stack([rng.permutation(experts)[:k] for _ in range(t)]).astype(np.int32)
    wts = rng.uniform(0.1, 1.0, (t, k)).astype(np.float32)
    got = layer.run(x, ids, wts).astype(np.float64)
    lut = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float64)

    def dq(name, e, rows, cols):
        blocks = sd[p + f"{name}_blocks"][e]
        nib = np.stack([blocks & 0x0F, blocks >> 4], axis=-1).reshape(rows, cols)
        return lut[nib] * np.exp2(np.repeat(sd[p + f"{name}_scales"][e].astype(np.float64) - 127, 32, axis=1))

    want = np.zeros((t, hidden))
    xf = x.astype(np.float64)
    for ti in range(t):
        for j in range(k):
            e = int(ids[ti, j])
            gu = dq("gate_up_proj", e, 2 * inter, hidden) @ xf[ti] + sd[p + "gate_up_proj_bias"][e]
            g, u = np.minimum(gu[0::2], 7.0), np.clip(gu[1::2], -7.0, 7.0)
            mid = (g / (1 + np.exp(-1.702 * g)) * (u + 1)).astype(np.float32).astype(bf16).astype(np.float64)
            y = (dq("down_proj", e, hidden, inter) @ mid).astype(np.float32).astype(bf16).astype(np.float64)
            want[ti] += wts[ti, j] * (y + sd[p + "down_proj_bias"][e])
    rel = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert rel < 1e-2, rel


def test_modelopt_layer_takes_the_checkpoints_scales():
    """ExpertWeights.from_modelopt(...).layer(): W4A4 NVFP4 with weight_scale_2 of gate, up and down
    as the per-expert alphas and the largest input_scale of each GEMM as its global scale -- the
    same bits as the MoeLayer built from those values by hand; without input scales, the error
    names them unless a1_scale / a2_scale are given."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(9)
    experts, hidden, inter, k, t = 3, 64, 32, 2, 4
    sd, _ = _modelopt(rng, experts, hidden, inter)
    ew = ExpertWeights.from_modelopt(sd, "model.layers.0.mlp.")
    layer = ew.layer(max_tokens=8, topk=k)
    x = rng.standard_normal((t, hidden)).astype(np.float32).astype(ml_dtypes.bfloat16)
    ids = np.stack([rng.permutation(experts)[:k] for _ in range(t)]).astype(np.int32)
    wts = rng.uniform(0.1, 1.0, (t, k)).astype(np.float32)
    by_hand = fp4gemm.moe.MoeLayer(
        ew.w13, ew.w13_scales, ew.w2, ew.w2_scales, max_tokens=8, topk=k, act_format="nvfp4",
        w13_alpha=np.ascontiguousarray(ew.w13_global[:, 0]), w13_alpha_up=np.ascontiguousarray(ew.w13_global[:, 1]),
        w2_alpha=ew.w2_global, a1_scale=0.25, a2_scale=0.5)
    np.testing.assert_array_equal(layer.run(x, ids, wts).view(np.uint16), by_hand.run(x, ids, wts).view(np.uint16))
    ew.w13_input_scale = np.full(experts, np.nan, np.float32)
    with pytest.raises(fp4gemm.ArgumentError) as err:
        ew.layer(max_tokens=8, topk=k)
    assert err.value.argument == "w13_input_scale"
    ew.layer(max_tokens=8, topk=k, a1_scale=0.25)  # given: taken
