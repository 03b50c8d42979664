"""Report pieces that need no child process: what is written and linked, the host-bound lead, MFU,
only written files listed, the phase timer's reserved peak, the baselines' step count."""
import re

import pytest
import torch

from common.analysis import aggregate, metrics, stats
from common.analysis.results_compare import Comparison, WorkloadComparison
from common.analysis.results_run import Ceilings, Evidence, HtaReading, KindView, OpView, OpViews
from common.render import report

from tests_helpers import run_result


def _evidence(idle: float) -> Evidence:
    return Evidence(trace="t", profiled_steps=5, ops_per_step=412, syncs_per_step=0, sync_ops_per_step={},
                    sync_ms_per_step=0, kernels_per_step=70, gpu_idle_share=idle, gpu_busy_ms_per_step=0.3,
                    launch_ms_per_step=0.5, idle_host_busy_ms_per_step=4.4, profiled_step_ms=4.9,
                    sync_apis_per_step={}, memcpy_per_step=0, phases={},
                    views=OpViews(**{k: OpView(key="calls", rows=[]) for k in report.VIEW_TITLES},
                                  by_kind=KindView(key="self_device_us", rows=[])),
                    hta=HtaReading(available=True, idle_share=idle + 0.08, blocked_on_full_queue_ms_per_step=0.0,
                                   launches_per_step=89))


def _entry(slow_medians, fast_medians, device="cuda", idle=0.95) -> WorkloadComparison:
    slow = [run_result(ms=m, device=device) for m in slow_medians]
    fast = [run_result(ms=m, device=device, variant="fast") for m in fast_medians]
    for r in slow + fast:
        r.evidence = _evidence(idle) if device == "cuda" else None
    entry = WorkloadComparison(slow=aggregate.aggregate(slow), fast=aggregate.aggregate(fast))
    entry.speedup = stats.speedup(entry.slow.process_ms, entry.fast.process_ms)
    entry.parity = aggregate.parity(slow[0], fast[0], {"early_steps": 5, "early_rtol": 0.01, "window": 10,
                                                         "rtol": 0.05})
    return entry


def _comparison(entry) -> Comparison:
    return Comparison(recipe="amp", title="AMP", evidence_keys=["peak_mb"], smoke=False, device="cuda", command="x",
                      results_dir="r", workloads={"churn": entry}, failures=[])


def test_a_host_bound_pair_that_does_not_pay_says_so_first(tmp_path):
    md = report.render_markdown(_comparison(_entry([2.8, 2.3, 1.7], [3.0, 3.1, 2.7])), tmp_path)
    section = md.split("## churn")[1]
    opening, first = [line for line in section.strip().splitlines() if line][:2]
    assert opening.startswith("**No significant difference: 0.77x (95% interval 0.43-1.34, 3 processes each)**")
    assert first.startswith("- **Host-bound: this step cannot get faster from this technique here.**")
    assert "idle 95%" in first and "412 ops" in first and "70 kernels" in first and "cuda_graphs" in first
    assert "they disagree by 8 points" in section  # HTA's idle share beside ours, flagged above 5 points


def test_a_pair_that_pays_or_runs_on_a_cpu_gets_no_host_bound_lead(tmp_path):
    faster = report.render_markdown(_comparison(_entry([10.0, 10.1, 9.9], [5.0, 5.1, 4.9])), tmp_path)
    assert "Host-bound" not in faster and "**Fast is 2.00x faster (95% interval 1.9" in faster
    cpu = report.render_markdown(_comparison(_entry([2.8, 2.3, 1.7], [3.0, 3.1, 2.7], device="cpu")), tmp_path)
    assert "Host-bound" not in cpu and "nothing to read" in cpu


def test_each_section_opens_with_the_verdict_memory_and_mechanism_and_the_interval_has_one_footnote(tmp_path):
    comparison = _comparison(_entry([10.0, 10.1, 9.9], [5.0, 5.1, 4.9]))
    comparison.evidence_keys = ["peak_mb", "syncs_per_step"]
    md = report.render_markdown(comparison, tmp_path)
    opening = md.split("## churn\n\n")[1].splitlines()[0]
    assert re.fullmatch(r"\*\*Fast is 2\.00x faster \(95% interval [\d.]+-[\d.]+, 3 processes each\)\*\*"
                        r"\[\^interval\]; peak memory \d+ -> \d+ MB \([+-][\d.]+%\); .*syncs.* -> .*\.", opening), \
        opening
    assert md.count("[^interval]:") == 1 and md.rstrip().splitlines()[-1].startswith("[^interval]: The 95% interval")
    assert md.index("## churn") < md.index("## Where and how it ran")  # the verdicts first, the stamp after
    assert "-> fast is 2.00x faster (95% interval" in report.terminal_table(comparison)


def test_only_written_files_are_listed(tmp_path):
    """A comparison where one variant failed has no speedup and no plot, and names no
    reports/<recipe>.png."""
    entry = _entry([10.0, 10.1], [5.0, 5.1])
    entry.fast, entry.speedup, entry.parity = None, None, None
    written = report.render(_comparison(entry), tmp_path)
    assert all(p.exists() for p in written) and not (tmp_path / "amp.png").exists()


def test_mfu_is_achieved_tflops_over_the_measured_ceiling():
    import types

    from common.analysis.results_run import OpRoof

    agg = aggregate.aggregate([run_result(ms=10.0, device="cuda")])
    agg.flops_per_step = 4e12  # 4 TFLOP in 10 ms: 400 TFLOP/s
    agg.ceiling = Ceilings(bf16_tflops=800.0)
    matmul = OpRoof("aten::mm", "matmul", "bfloat16", 1, 4e12, 1e6, 5.0, None, None)  # the step's math: bf16
    agg.evidence = types.SimpleNamespace(roofline=types.SimpleNamespace(ops=[matmul]))
    assert metrics.get("tflops").value(agg) == pytest.approx(400.0)
    assert metrics.get("mfu").text(agg) == "50.0%"
    agg.ceiling = None  # a CPU run, or not measured: no MFU rather than a guess
    assert metrics.get("mfu").text(agg) == "n/a"


def test_serving_reports_bytes_moved_per_second():
    agg = aggregate.aggregate([run_result(ms=0.5)])
    agg.bytes_per_step = 512 * 38 * 4 + 512 * 4
    assert metrics.get("bytes_per_s").text(agg) == "159.74 MB/s"


def test_the_phase_timer_keeps_the_largest_reserved_peak(monkeypatch):
    """Under --phase-timing every phase resets the allocator's peaks; the run's reserved peak must
    be the largest seen in any phase, not the last phase's."""
    from common.measure import timing

    reserved = iter([300 * 2**20, 900 * 2**20, 200 * 2**20])
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a: 100 * 2**20)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda *a: next(reserved))
    monkeypatch.setattr(torch.cuda, "Event", lambda enable_timing: type("E", (), {"record": lambda self, s: None})())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: "stream")
    timer = timing.PhaseTimer(torch.device("cuda"))
    for phase in ("forward", "backward", "optimizer"):
        timer.stop(0, phase, timer.start())
    assert timer.reserved_peak_mb == 900


def test_the_churn_baseline_trains_the_seed_s_440_steps():
    """5 epochs at batch 64 over 5,634 rows is 440 steps: warm-up + timed + profiled (+ the
    profiler's warm-up step) + the FLOP-counted step. The old settings ran 441."""
    import baselines

    for mode in ("cuda", "cpu"):
        d = baselines.DEFAULTS["churn"][mode]
        assert d["warmup"] + d["steps"] + d["profile_steps"] + 1 + 1 == 440


def test_the_memory_budget_caps_the_allocator_of_the_current_gpu(monkeypatch):
    """torch.device("cuda") has no index; set_per_process_memory_fraction needs one (the first
    review caught that every budgeted CUDA run would have crashed)."""
    from common.measure import memory

    calls = []
    props = type("P", (), {"total_memory": 80e9})()
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda frac, index: calls.append((frac, index)))
    capped, notice = memory.cap(torch.device("cuda"), 16)
    assert calls == [(0.2, 0)] and capped == 16 and "capped at 16 GB of 80 GB" in notice
    capped, notice = memory.cap(torch.device("cpu"), 16)
    assert capped is None and "needs CUDA" in notice


def test_backward_ops_on_autograd_s_thread_belong_to_the_backward_phase(tmp_path):
    """On CUDA the autograd engine runs the backward on its own thread: the backward range (on the
    main thread) must still own those ops and their launches, while a loader thread's do not."""
    import json

    from common.measure import profiling

    ann = lambda name, ts, dur, tid=1: {"ph": "X", "cat": "user_annotation", "name": name, "ts": ts, "dur": dur,  # noqa: E731
                                         "tid": tid}
    events = [
        ann("ProfilerStep#1", 0, 100), ann("backward", 10, 50),
        {"ph": "X", "cat": "cpu_op", "name": "autograd::engine::evaluate_function: AddmmBackward0", "ts": 12,
         "dur": 20, "tid": 7},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 13, "dur": 5, "tid": 7},
        {"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernel", "ts": 14, "dur": 1, "tid": 7,
         "args": {"correlation": 3}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "ts": 20, "dur": 5, "tid": 9},  # a loader thread
        {"ph": "X", "cat": "kernel", "name": "k3", "ts": 16, "dur": 4, "args": {"correlation": 3}},
    ]
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    backward = profiling.trace_evidence(path, torch.device("cuda"), ("backward",))["phases"]["backward"]
    assert backward["ops"] == 1 and backward["kernels"] == 1  # the evaluate_function and its nested mm: one call


def test_a_report_cites_the_latest_aa_of_its_own_device_as_the_noise_floor(tmp_path):
    from common.analysis.results import write_result

    def report_md():
        return report.render_markdown(_comparison(_entry([10.0, 10.1, 9.9], [5.0, 5.1, 4.9])), tmp_path)

    assert "noise floor" not in report_md()  # no A/A here yet
    for folder, medians, date in (("amp", [10.0, 10.2, 9.8], "2026-11-23"),
                                  ("sync_removal", [10.0, 10.1, 9.9], "2026-11-24")):
        aa = _comparison(_entry(medians, [10.1, 9.9, 10.0]))
        aa.aa = True
        aa.workloads["churn"].slow.env.date = f"{date}T10:00:00+00:00"
        write_result(tmp_path / "results" / folder / "aa" / "comparison.json", aa)
    other = _comparison(_entry([1.0, 1.1], [1.0, 1.1], device="cpu"))  # another device: never cited here
    other.aa = True
    write_result(tmp_path / "results" / "compile" / "aa" / "comparison.json", other)
    row = next(line for line in report_md().splitlines() if line.startswith("| noise floor here (A/A) |"))
    s = stats.speedup([10.0, 10.1, 9.9], [10.1, 9.9, 10.0])  # the newer one's
    assert f"{s.ratio:.2f}x, 95% interval {s.low:.2f}-{s.high:.2f}: amp/churn's slow script against itself" in row
    assert "2026-11-24" in row and "3 processes each" in row


def test_a_ceiling_measured_on_a_busy_machine_is_not_reused(tmp_path, monkeypatch):
    """bf16 0.27 TFLOP/s measured beside another job against 0.91 on an idle core was cached and divided
    every later report: a ceiling keeps its load, and a busy one reads as missing (measured again)."""
    import json

    from common.analysis import ceiling
    from common.analysis.results_run import Ceilings, Load

    from tests_helpers import run_result

    monkeypatch.setenv("COOKBOOK_DATA_DIR", str(tmp_path))
    stamp = run_result().env
    for others, kept in ((1.2, False), (0.1, True)):
        found = Ceilings(gpu="CPU test", bf16_tflops=0.27, fp32_tflops=0.2,
                         load=Load(others_cores=others, cores=2, wall_s=3.0, threads=2, own_cores=1.0))
        ceiling.path().write_text(json.dumps({ceiling.device_key(stamp): found.to_json()}))
        assert (ceiling.cached(stamp, cpu=True) is not None) == kept
    assert not Load(others_cores=0.9, cores=16, wall_s=3, own_cores=2.1).busy  # a GPU box: 13 cores idle
    assert Load(others_cores=0.9, cores=2, wall_s=3, own_cores=1.0).busy  # both cores in demand
    assert not Load(others_cores=1.9, cores=2, wall_s=0.2, own_cores=0.1).busy  # too short to say


def test_the_load_of_a_spinning_process_on_these_cores_is_measured():
    """Spinners beside the measuring process (its siblings: its own children's time is its own)."""
    import os
    import subprocess
    import sys

    from conftest import REPO

    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in sorted(os.sched_getaffinity(0))]
    try:
        probe = ("import time; from common.measure import contention\n"
                 "with contention.Window() as w: time.sleep(1.0)\nprint(w.load.others_cores)")
        out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
    finally:
        for p in spin:
            p.kill()
    assert float(out.stdout.strip()) >= 0.8 * len(spin), out.stdout + out.stderr


def test_a_busy_machine_is_said_above_the_headline_and_the_folder_named_is_the_one_written(tmp_path):
    """Two make recipe-amp --smoke at once on 2 cores ran 35x slower, and neither report said so."""
    from common.analysis.results_run import Load

    entry = _entry([2.8, 2.3, 1.7], [3.0, 3.1, 2.7])
    entry.fast.load = Load(others_cores=0.97, cores=2, wall_s=3.0, own_cores=1.1)
    local = tmp_path / "local"
    md = report.render_markdown(_comparison(entry), local)
    section = [line for line in md.split("## churn")[1].splitlines() if line]
    assert section[0].startswith("> **The machine was busy**: other processes used 0.97 of the 2 core(s)")
    assert section[1].startswith("**No significant difference")
    assert f"(`{local / 'results' / 'amp'}/`)" in md.splitlines()[2]  # where this run's results are, not reports/
    assert "BUSY MACHINE: other processes used 0.97 of the 2 core(s)" in report.terminal_table(_comparison(entry))
    idle = _entry([2.8, 2.3, 1.7], [3.0, 3.1, 2.7])
    idle.fast.load = Load(others_cores=0.1, cores=2, wall_s=3.0, own_cores=1.0)
    assert "machine was busy" not in report.render_markdown(_comparison(idle), local)


def test_an_older_results_statistic_is_said_as_it_was_and_bursts_are_a_finding(tmp_path):
    import json

    from common.analysis.results_compare import Comparison
    from common.analysis.results_run import Bursts

    entry = _entry([2.8, 2.3, 1.7], [3.0, 3.1, 2.7])
    # a comparison as this version's predecessor wrote it: per-process medians, no statistic
    old = Comparison.from_json(json.loads(json.dumps(_comparison(entry).to_json()).replace(
        '"process_ms"', '"process_medians_ms"').replace('"statistic": "mean step", ', '')))
    assert old.workloads["churn"].slow.statistic == "median step" and old.workloads["churn"].slow.process_ms
    md = report.render_markdown(old, tmp_path)
    assert "each the median step (results written before the mean step was the figure)" in md
    assert ": per-process median steps 2.800, 2.300, 1.700 ms" in md
    entry.fast.bursts = [Bursts(period=2, pattern_ms=[4.0, 128.0], slow_share=0.5, cause="loader workers",
                                words="steps alternate 4 ms and 128 ms: batches arrive 2 at a time"), None, None]
    md = report.render_markdown(_comparison(entry), tmp_path)
    assert "each the timed stretch's wall time over its steps (the mean step)" in md
    assert "  - **Steps in bursts** (fast): steps alternate 4 ms and 128 ms: batches arrive 2 at a time " \
           "(1 of 3 processes)" in md
    assert "bursts: steps alternate 4 ms" in report.terminal_table(_comparison(entry))
