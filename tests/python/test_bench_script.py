"""Host tier: scripts/bench_lib.sh, the README's benchmark command's parts -- the arguments it gives `fp4gemm bench`
when the user passes some, and the main job's four suites run with a stand-in CLI (one suite failing: the others
still run, the job fails naming it)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "scripts" / "bench_lib.sh"
pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def bench_args(*args: str) -> list[str]:
    script = f'set -euo pipefail; source "{LIB}"; bench_args "$@"; printf "%s\\n" "${{BENCH_ARGS[@]}}"'
    out = subprocess.run(["bash", "-c", script, "bash", *args], check=True, capture_output=True, text=True).stdout
    return out.splitlines()


def test_arguments_get_a_suite_and_a_json_file_only_where_not_given():
    assert bench_args("--cases", "1") == ["--suite", "all", "--cases", "1", "--json", "bench/results/latest.json"]
    assert bench_args("--suite", "layer", "--act", "bf16") == [
        "--suite", "layer", "--act", "bf16", "--json", "bench/results/latest_layer.json"]
    assert bench_args("--suite=dual") == ["--suite=dual", "--json", "bench/results/latest_dual.json"]
    assert bench_args("--suite", "moe", "--json", "z.json") == ["--suite", "moe", "--json", "z.json"]
    assert bench_args("--no-peers", "--json=y.json") == ["--suite", "all", "--no-peers", "--json=y.json"]


def run_main_job(tmp_path: Path, fail_suite: str) -> subprocess.CompletedProcess:
    cli = tmp_path / "cli"
    log = tmp_path / "calls"
    # the stand-in logs each call and fails the suite named (args: bench --suite S ...)
    cli.write_text(f'#!/usr/bin/env bash\necho "$*" >> "{log}"\n[ "$3" = "{fail_suite}" ] && exit 3\nexit 0\n')
    cli.chmod(0o755)
    script = f'set -euo pipefail; source "{LIB}"; bench_main_job "{cli}"'
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True)


def test_the_main_job_runs_four_suites_and_fails_naming_a_failed_one(tmp_path):
    ok = run_main_job(tmp_path, "none")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert [c.split()[2] for c in calls] == ["all", "dual", "layer", "layer"]
    assert "--act bf16 --weight-layout pieces --values checkpoint --json bench/results/latest_layer_w4a16.json" in calls[2]
    assert "--act nvfp4 --weight-layout pieces --json bench/results/latest_layer_w4a4.json" in calls[3]
    assert "[bench] 4/4 layer suite, W4A4 NVFP4" in ok.stdout and "FAILED" not in ok.stdout
    (tmp_path / "calls").unlink()
    bad = run_main_job(tmp_path, "dual")
    assert bad.returncode == 1
    assert len((tmp_path / "calls").read_text().splitlines()) == 4  # the suites after the failed one still ran
    assert "[bench] 2/4 dual GEMM suite FAILED (exit 3)" in bad.stdout
    assert "FAILED: 2/4 dual GEMM suite" in bad.stdout
