"""Host tier: bench/issue52_rounds.py, the summary of issue 52's table over rounds (median / min / max, the burst
beside, the floors, targets judged on an H200 only, refusals of mixed cards and short rounds)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("issue52_rounds", ROOT / "bench" / "issue52_rounds.py")
rounds_mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rounds_mod)


def result(gpu, reps, cells):
    """A tk_layer.py-shaped result: cells {(shape, T): (fp4gemm_us, tk_us)}."""
    return {"gpu": gpu, "settings": {"reps": reps},
            "results": [{"shape": s, "T": T, "impls": {"fp4gemm_run": {"graph_us": f}, "tk": {"graph_us": t}}}
                        for (s, T), (f, t) in cells.items()]}


def test_median_min_max_ratio_and_targets_on_an_h200():
    r = [result("NVIDIA H200", 100, {("gpt-oss-120b", 1): (f, 72.0), ("qwen3-30b-a3b", 8): (g, 90.0)})
         for f, g in ((24.0, 61.0), (26.0, 59.0), (25.0, 59.5))]
    burst = result("NVIDIA H200", 20, {("gpt-oss-120b", 1): (23.5, 71.0), ("qwen3-30b-a3b", 8): (58.0, 89.0)})
    s = rounds_mod.summarise(r, burst, min_reps=100)
    c = {(x["shape"], x["T"]): x for x in s["cells"]}
    g = c[("gpt-oss-120b", 1)]
    assert g["fp4gemm_us"] == {"median": 25.0, "min": 24.0, "max": 26.0} and g["rounds"] == 3
    assert g["x_tk"] == pytest.approx(72.0 / 25.0) and g["target_us"] == 25.0 and g["met"] is True
    assert g["fp4gemm_burst_us"] == 23.5 and g["tk_burst_us"] == 71.0
    q = c[("qwen3-30b-a3b", 8)]
    assert q["fp4gemm_us"]["median"] == 59.5 and q["met"] is True
    assert "| gpt-oss-120b | 1 | 25.0 [24.0, 26.0] | 72.0 | 2.88 | - | - | 23.5 | 71.0 | 25.0 | yes |" in rounds_mod.markdown(s)
    r[2]["results"][0]["impls"]["fp4gemm_run"]["graph_us"] = 25.5  # the median moves past the target
    assert rounds_mod.summarise(r)["cells"][0]["met"] is False


def test_other_cards_are_not_judged_and_mixed_cards_or_short_rounds_refused(tmp_path):
    cells = {("gpt-oss-120b", 1): (20.0, 70.0)}
    s = rounds_mod.summarise([result("NVIDIA H100 80GB HBM3", 100, cells)])
    assert s["cells"][0]["met"] is None and not s["targets_apply"]
    with pytest.raises(SystemExit, match="different GPUs"):
        rounds_mod.summarise([result("NVIDIA H100 80GB HBM3", 100, cells), result("NVIDIA H200", 100, cells)])
    with pytest.raises(SystemExit, match="min-reps"):
        rounds_mod.summarise([result("NVIDIA H200", 20, cells)], min_reps=100)
    p = tmp_path / "r.json"
    p.write_text(json.dumps(result("NVIDIA H200", 100, cells)))
    out = tmp_path / "s.json"
    assert rounds_mod.main(["--rounds", str(p), "--json", str(out)]) == 0
    assert json.loads(out.read_text())["cells"][0]["met"] is True


def dims(r, shape, T, E, H, I, k, active):
    for row in r["results"]:
        if (row["shape"], row["T"]) == (shape, T):
            row.update(E=E, H=H, I=I, topk=k, active_experts=active)
    return r


def test_floors_hbm_or_bf16_by_the_issue_rates_and_per_card_rates():
    cells = {("gpt-oss-120b", 1): (31.4, 72.4), ("gpt-oss-120b", 4096): (1680.0, 2182.0)}
    r = result("NVIDIA H200", 100, cells)
    dims(r, "gpt-oss-120b", 1, 128, 2880, 2880, 4, 4)
    dims(r, "gpt-oss-120b", 4096, 128, 2880, 2880, 4, 128)
    s = rounds_mod.summarise([r])
    c = {(x["shape"], x["T"]): x for x in s["cells"]}
    # T 1: 4 experts x 3 H I x (0.5 + 1/32) bytes over 4.24 TB/s
    hbm1 = 4 * 3 * 2880 * 2880 * (0.5 + 1 / 32) / 4.24e12 * 1e6
    f1 = c[("gpt-oss-120b", 1)]["floor"]
    assert f1["bound"] == "hbm" and f1["us"] == pytest.approx(hbm1) and f1["us"] == pytest.approx(12.47, abs=0.01)
    assert c[("gpt-oss-120b", 1)]["of_floor"] == pytest.approx(hbm1 / 31.4)
    # T 4096: 2 T k 3 H I over 790 TFLOP/s is the larger bound
    f4 = c[("gpt-oss-120b", 4096)]["floor"]
    assert f4["bound"] == "bf16" and f4["us"] == pytest.approx(2 * 4096 * 4 * 3 * 2880 * 2880 / 790e12 * 1e6)
    assert f4["hbm_us"] == pytest.approx(128 * 3 * 2880 * 2880 * (0.5 + 1 / 32) / 4.24e12 * 1e6)
    assert f"| gpt-oss-120b | 1 | 31.4 [31.4, 31.4] | 72.4 | 2.31 | {hbm1:.1f} (hbm) | {hbm1 / 31.4:.2f} | 25.0 | no |" in (
        rounds_mod.markdown(s))
    # another card: no floors unless its rates are given, then those rates
    h = result("NVIDIA H100 80GB HBM3", 100, cells)
    dims(h, "gpt-oss-120b", 1, 128, 2880, 2880, 4, 4)
    assert rounds_mod.summarise([h])["cells"][0]["floor"] is None
    assert "no floors" in rounds_mod.markdown(rounds_mod.summarise([h]))
    sh = rounds_mod.summarise([h], copy_tbps=3.0, bf16_tflops=700.0)
    assert sh["cells"][0]["floor"]["us"] == pytest.approx(hbm1 * 4.24 / 3.0)
    with pytest.raises(SystemExit, match="both or neither"):
        rounds_mod.summarise([h], copy_tbps=3.0)
    with pytest.raises(SystemExit, match="positive"):
        rounds_mod.summarise([h], copy_tbps=0.0, bf16_tflops=700.0)


def test_floor_dims_from_any_round_and_routings_that_differ_refused():
    cells = {("gpt-oss-120b", 1): (31.0, 72.0)}
    with_dims = dims(result("NVIDIA H200", 100, cells), "gpt-oss-120b", 1, 128, 2880, 2880, 4, 4)
    without = result("NVIDIA H200", 100, cells)
    for order in ([with_dims, without], [without, with_dims]):
        assert rounds_mod.summarise(order)["cells"][0]["floor"] is not None
    other = dims(result("NVIDIA H200", 100, cells), "gpt-oss-120b", 1, 128, 2880, 2880, 4, 3)
    with pytest.raises(SystemExit, match="active experts"):
        rounds_mod.summarise([with_dims, other])
