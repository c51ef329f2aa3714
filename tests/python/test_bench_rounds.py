"""Host tier: bench/issue52_rounds.py, the summary of issue 52's table over rounds (median / min / max, the burst
beside, targets judged on an H200 only, refusals of mixed cards and short rounds)."""

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
    assert "| gpt-oss-120b | 1 | 25.0 [24.0, 26.0] | 72.0 | 2.88 | 23.5 | 71.0 | 25.0 | yes |" in rounds_mod.markdown(s)
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
