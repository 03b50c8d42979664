"""`make ncu-<recipe>`: Nsight Compute's details-page CSV read (its quirks: ncu's own lines before the
header, units it scales, thousands separators, "n/a", rule rows), kernels grouped and set against the
roofline ridge, the slow-vs-fast table, the harness's window around one step, and the runner's
checks and plumbing with a stand-in ncu. The CSVs here are written in the format NVIDIA documents and
public exports show; no GPU has produced one for this project yet."""
import csv
import io
import json
import os
import stat
import sys
import textwrap

import pytest
import torch

from common.analysis import ncu
from common.measure import nvtx
from common.render import ncu as render
from common.runners import launch
from common.runners import ncu as runner

from conftest import run_module

HEADER = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
          "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit", "Metric Value", "Rule Name",
          "Rule Type", "Rule Description", "Estimated Speedup Type", "Estimated Speedup"]
GEMM = "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwc_tn_n_kernel__5x_cudnn"
ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
       "std::array<char *, 3>>(int)")
ADAM = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
        "TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4>, float *>(T1, T2)")
BF16 = "sm__ops_path_tensor_src_bf16_dst_fp32.sum"
PEAKS = [(ncu.FFMA_PEAK, "inst/cycle", "16,896"), (ncu.SM_HZ, "cycle/nsecond", "1.98"),
         (f"{BF16}.peak_sustained", "", "499,495"), (ncu.DRAM_PEAK, "byte/cycle", "2,560"),
         (ncu.DRAM_HZ, "cycle/usecond", "1,308")]


def launch_rows(i, name, us, sm, mem, occ, dram_mb, ffma, tensor="0", peaks=True):
    """One kernel launch's rows as ncu writes them: its metrics, scaled units, then a rule's advice row."""
    metrics = [(ncu.DURATION, "us", us), (ncu.SM_PCT, "%", sm), (ncu.MEMORY_PCT, "%", mem),
               (ncu.OCCUPANCY_PCT, "%", occ), (ncu.DRAM_BYTES, "Mbyte", dram_mb),
               ("smsp__sass_thread_inst_executed_op_ffma_pred_on.sum", "inst", ffma),
               ("smsp__sass_thread_inst_executed_op_fadd_pred_on.sum", "inst", "0"),
               ("smsp__sass_thread_inst_executed_op_dfma_pred_on.sum", "", "n/a"),
               (BF16, "", tensor), ("sm__ops_path_tensor_src_fp16_dst_fp32.sum", "", "n/a"),
               *(PEAKS if peaks else [])]
    ident = [str(i), "4242", "python3", "127.0.0.1", name, "1", "7", "(128, 1, 1)", "(528, 1, 1)", "0", "9.0"]
    rows = [ident + ["Command line profiler metrics", m, u, v] for m, u, v in metrics]
    rows.append(ident + ["Launch Statistics", "Registers Per Thread", "register/thread", "(!) 32"])  # not ours
    rows.append(ident + ["SpeedOfLight", "", "", "", "SOLBottleneck", "OPT", "This kernel grid is too small", "", ""])
    return rows


def ncu_csv(launches) -> str:
    """A details-page export: ncu's own lines first, every field quoted, short rows where no rule applies."""
    buf = io.StringIO()
    buf.write("==PROF== Connected to process 4242 (/usr/bin/python3)\n")
    w = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n")
    w.writerow(HEADER)
    for rows in launches:
        w.writerows(rows)
    return buf.getvalue()


SLOW = ncu_csv([launch_rows(0, GEMM, "1,210.5", "71.2", "40.1", "24.9", "52.5", "0", tensor="6,442,450,944"),
                launch_rows(1, ADD, "40", "12", "88", "90", "24", "0"),
                launch_rows(2, ADD, "60", "14", "90", "80", "36", "0"),
                launch_rows(3, ADAM, "300", "20", "85", "60", "180", "1,000,000")])
FAST = ncu_csv([launch_rows(0, GEMM, "610.0", "70.0", "42.0", "25.0", "12.5", "0", tensor="6,442,450,944"),
                launch_rows(1, ADD, "20", "12", "88", "90", "12", "0")])


def test_units_and_numbers_become_base_units():
    assert ncu.unit_factor("us") == 1e-6 and ncu.unit_factor("nsecond") == 1e-9 and ncu.unit_factor("msecond") == 1e-3
    assert ncu.unit_factor("Mbyte") == 1e6 and ncu.unit_factor("Kbyte") == 1e3 and ncu.unit_factor("byte") == 1
    assert ncu.unit_factor("cycle/nsecond") == pytest.approx(1e9) and ncu.unit_factor("Ghz") == 1e9
    assert ncu.unit_factor("Gbyte/second") == 1e9 and ncu.unit_factor("%") == 1 and ncu.unit_factor("") == 1
    with pytest.raises(ncu.NcuFormatError, match="furlong"):
        ncu.unit_factor("furlong")
    assert ncu.number('1,234.5') == 1234.5 and ncu.number("n/a") is None and ncu.number("") is None
    with pytest.raises(ncu.NcuFormatError, match="not a number"):
        ncu.number("(!) 32")


def test_a_details_csv_is_read_per_launch_in_base_units():
    launches = ncu.parse(SLOW)
    assert [x.id for x in launches] == ["0", "1", "2", "3"]
    gemm = launches[0]
    assert gemm.get(ncu.DURATION) == pytest.approx(1210.5e-6) and gemm.get(ncu.DRAM_BYTES) == pytest.approx(52.5e6)
    assert gemm.get(ncu.SM_PCT) == pytest.approx(71.2)
    assert gemm.get("smsp__sass_thread_inst_executed_op_dfma_pred_on.sum") is None  # "n/a"
    assert ncu.flops(gemm) == pytest.approx(6_442_450_944) and ncu.tensor_path([gemm]) == BF16
    assert ncu.flops(launches[3]) == pytest.approx(2_000_000)  # an FMA is 2
    assert ncu.tensor_path(launches[3:]) is None
    assert "Registers Per Thread" not in gemm.metrics  # a section's metric, its unit unknown here: left out


def test_a_csv_of_another_page_is_one_clear_error():
    with pytest.raises(ncu.NcuFormatError, match="no \"ID\" header"):
        ncu.parse("==ERROR== the application returned an error\n")
    raw = '"ID","Kernel Name","gpu__time_duration.sum"\n"","","nsecond"\n"0","k","1000"\n'
    with pytest.raises(ncu.NcuFormatError, match="--page details"):
        ncu.parse(raw)


@pytest.mark.parametrize("name, short", [
    (ADD, "vectorized_elementwise_kernel<CUDAFunctor_add>"),
    (ADAM, "multi_tensor_apply_kernel<FusedAdamMathFunctor>"),
    (GEMM, GEMM),
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1, true>(cudnnTensorStruct, const T1 *)",
     "bn_fw_tr_1C11_kernel_NCHW"),
    ("void at::native::elementwise_kernel<128, 2, void at::native::gpu_kernel_impl<at::native::BinaryFunctor<float, "
     "float, float, at::native::binary_internal::MulFunctor<float>>>(at::TensorIteratorBase &, const T1 &)::"
     "{lambda(int)#1}>(int, T3)", "elementwise_kernel<MulFunctor>"),
    ("void at::native::elementwise_kernel<128, 4, void at::native::gpu_kernel_impl_nocast<at::native::"
     "direct_copy_kernel_cuda(at::TensorIteratorBase &)::[lambda() (instance 3)]>(at::TensorIteratorBase &)>(int, T3)",
     "elementwise_kernel<direct_copy_kernel_cuda>"),
])
def test_kernel_names_are_shortened_to_what_tells_them_apart(name, short):
    assert ncu.short_name(name) == short


def test_launches_group_by_kernel_with_time_weighted_rates_and_intensity():
    kernels = {k.name: k for k in ncu.kernels(ncu.parse(SLOW))}
    assert list(kernels)[0] == GEMM  # heaviest first
    add = kernels[ADD]
    assert add.launches == 2 and add.total_s == pytest.approx(100e-6)
    assert add.sm_pct == pytest.approx((12 * 40 + 14 * 60) / 100)  # weighted by duration
    assert add.occupancy_pct == pytest.approx((90 * 40 + 80 * 60) / 100)
    assert add.intensity == 0.0  # no FLOP: pure data movement
    gemm = kernels[GEMM]
    assert gemm.tensor_path == BF16 and gemm.intensity == pytest.approx(6_442_450_944 / 52.5e6)


def test_the_ridge_of_each_kernel_comes_from_ncus_peaks_for_its_path():
    launches = ncu.parse(SLOW)
    peaks = ncu.peaks(launches)
    assert peaks.fp32_flops_per_s == pytest.approx(2 * 16896 * 1.98e9)  # 66.9 TFLOP/s, an H100 SXM's FP32
    assert peaks.dram_bytes_per_s == pytest.approx(2560 * 1.308e9)  # 3.35 TB/s
    assert peaks.tensor_flops_per_s == {BF16: pytest.approx(499_495 * 1.98e9)}  # 989 TFLOP/s dense bf16
    gemm, adam = (next(k for k in ncu.kernels(launches) if k.name == n) for n in (GEMM, ADAM))
    assert peaks.ridge(gemm) == pytest.approx(499_495 * 1.98e9 / (2560 * 1.308e9))  # ~295 FLOP/B
    assert peaks.ridge(adam) == peaks.ridge() == pytest.approx(2 * 16896 * 1.98e9 / (2560 * 1.308e9))  # ~20
    assert ncu.peaks([]).ridge() is None
    no_dram = [ncu.Launch("0", "k", {ncu.FFMA_PEAK: 1.0, ncu.SM_HZ: 1e9}), ncu.Launch("1", "k", {ncu.DRAM_PEAK: 2.0})]
    assert ncu.peaks(no_dram).fp32_flops_per_s == 2e9 and ncu.peaks(no_dram).dram_bytes_per_s is None


def test_the_table_matches_kernels_by_name_and_shows_a_kernel_one_twin_lacks():
    slow, fast = ncu.kernels(ncu.parse(SLOW)), ncu.kernels(ncu.parse(FAST))
    rows = ncu.compare(slow, fast, top=3)
    assert [r.label for r in rows] == [GEMM, "multi_tensor_apply_kernel<FusedAdamMathFunctor>",
                                       "vectorized_elementwise_kernel<CUDAFunctor_add>"]
    assert rows[1].fast is None and rows[0].fast.total_s == pytest.approx(610e-6)
    assert [r.label for r in ncu.compare(slow, fast, top=1)] == [GEMM]


def test_kernels_that_share_a_short_name_keep_their_own_rows():
    mul = ADD.replace("CUDAFunctor_add", "MulFunctor")
    mean, total = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::"
                   f"{ops}<float, float, float, float>, unsigned int, float, 4>>(T3)" for ops in ("MeanOps", "SumOps"))
    assert ncu.short_name(mean) == "reduce_kernel<MeanOps>" and ncu.short_name(mul).endswith("<MulFunctor>")
    same = [ADD, ADD.replace("<4,", "<2,")]  # two instances, one label
    assert ncu.labels(same) == {ADD.replace("<4,", "<2,"): "vectorized_elementwise_kernel<CUDAFunctor_add> #1",
                                ADD: "vectorized_elementwise_kernel<CUDAFunctor_add> #2"}
    assert ncu.labels([mean, total]) == {mean: "reduce_kernel<MeanOps>", total: "reduce_kernel<SumOps>"}


@pytest.fixture(scope="module")
def twin_json(tmp_path_factory):
    """A real twin's result file (a CPU smoke run): the report's stamp, and what a stand-in ncu hands back."""
    out = tmp_path_factory.mktemp("twin") / "r.json"
    proc = run_module("recipes.amp.churn_slow", "--smoke", "--device", "cpu", "--data", "synthetic",
                      "--profile-steps", "0", "--probe-steps", "0", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


def test_the_report_sets_slow_against_fast_with_the_ridge(twin_json):
    from common.analysis.results import read_result
    from common.analysis.results_run import RunResult

    result = read_result(twin_json, RunResult)
    pair = render.PairKernels("resnet18", render.Twin(result, ncu.parse(SLOW), "slow.csv"),
                              render.Twin(result, ncu.parse(FAST), "fast.csv"), [])
    failed = render.PairKernels("churn", None, render.Twin(result, ncu.parse(FAST), "f.csv"),
                                ["slow: the run FAILED (exit 1) after 3.0 s (log: x.log)"])
    md = render.render_markdown("amp", [pair, failed], top=5, scope="every kernel of timed step 1",
                                command="make ncu-amp")
    assert md.startswith("# Kernels of `amp`") and "make ncu-amp" in md and result.env.git_commit in md
    assert ("Ridge points: FP32 20.0 FLOP/B (66.9 TFLOP/s), tensor cores bf16 dst fp32 295.4 FLOP/B (989 TFLOP/s), "
            "over 3348 GB/s of DRAM") in md
    assert "| kernel launches profiled | 4 | 2 |" in md
    assert "| kernel time, µs (sum, serialized) | 1610.5 | 630.0 |" in md
    adam = [line for line in md.splitlines() if "FusedAdamMathFunctor" in line]
    assert adam[0].startswith("| `multi_tensor_apply_kernel<FusedAdamMathFunctor>` | slow | 1 | 300.0 | 18.6% |")
    assert adam[1] == "| `multi_tensor_apply_kernel<FusedAdamMathFunctor>` | fast | 0 | | | | | | | |"
    gemm = [line for line in md.splitlines() if line.startswith(f"| `{GEMM}` |")]
    assert gemm[0].endswith("| 122.7 | memory side |") and gemm[1].endswith("| 515.4 | compute side |")
    add = next(line for line in md.splitlines() if "CUDAFunctor_add" in line and "| slow |" in line)
    assert add.endswith("| 0.0 | memory side |")
    assert "## churn" in md and "- FAILED slow: the run FAILED" in md


def test_the_harness_opens_the_profiler_window_on_cuda_only(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda.profiler, "start", lambda: calls.append("start"))
    monkeypatch.setattr(torch.cuda.profiler, "stop", lambda: calls.append("stop"))
    with nvtx.kernel_window(torch.device("cpu"), True):
        pass
    with nvtx.kernel_window(torch.device("cuda"), False):
        pass
    assert calls == []
    with pytest.raises(RuntimeError), nvtx.kernel_window(torch.device("cuda"), True):
        calls.append("step")
        raise RuntimeError("the step failed")
    assert calls == ["start", "step", "stop"]  # closed even when the step fails


def test_the_timed_loop_opens_it_around_the_step_the_runner_names_and_the_work_of_that_step(monkeypatch):
    import contextlib

    from common import env
    from common.measure import stages

    calls = []

    @contextlib.contextmanager
    def recorder(device, active):
        calls.append(f"open {active}")
        yield
        calls.append(f"close {active}")

    monkeypatch.setattr(stages, "kernel_window", recorder)
    monkeypatch.setenv(env.KERNEL_STEP_ENV, "1")
    warm = stages.WarmUp(steps=1, wall_s=0.1, first_step_s=0.1, step_s=0.01)
    phases = stages.Phases(nvtx.Ranges(torch.device("cpu")), None)
    for batch in stages.timed(lambda: "batch", torch.device("cpu"), 3, 8, warm, phases, contextlib.nullcontext()):
        calls.append(f"{batch} work")  # the script's forward, backward and optimizer for this batch
    assert calls == ["open False", "batch work", "close False", "open True", "batch work", "close True",
                     "open False", "batch work", "close False"]
    monkeypatch.setenv(env.KERNEL_STEP_ENV, "x")
    assert env.kernel_step() is None


def _bad(*args, path=None):
    env = {"PATH": path} if path is not None else None
    proc = run_module("common.runners.ncu", *args, env=env)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    return lines[0]


def test_bad_input_and_a_missing_ncu_are_one_line_each(tmp_path):
    assert "unknown recipe 'nope'" in _bad("nope")
    assert "torchrun" in _bad("ddp")
    assert "--workloads: no amp pair vgg" in _bad("amp", "--workloads", "vgg")
    assert "--device cpu: ncu profiles CUDA kernels" in _bad("amp", "--device", "cpu")
    assert "--steps is set by the runner itself" in _bad("amp", "--", "--steps", "5")
    assert "ncu not found" in _bad("amp", path=str(tmp_path))  # a PATH without ncu


FAKE_NCU = """\
#!{python}
# A stand-in for ncu: records how it was called, runs the twin on the CPU, and exports a CSV.
import json, os, pathlib, subprocess, sys
args = sys.argv[1:]
log = pathlib.Path({log!r})
if "--import" in args:
    rep = pathlib.Path(args[args.index("--import") + 1])
    print(pathlib.Path({csvs!r}, rep.read_text()).read_text(), end="")
    sys.exit(0)
python = args.index({python!r})
with open(log, "a") as f:
    f.write(json.dumps({{"ncu": args[:python], "twin": args[python:],
                        "step": os.environ.get("COOKBOOK_KERNEL_STEP")}}) + "\\n")
twin = [a if a != "cuda" else "cpu" for a in args[python:]]
code = subprocess.run(twin).returncode
stem = args[args.index("--export") + 1]
variant = "slow" if twin[2].endswith("_slow") else "fast"
pathlib.Path(stem + ".ncu-rep").write_text(variant + ".csv")
sys.exit(code)
"""


def test_the_runner_profiles_each_twin_under_ncu_and_writes_the_table(tmp_path, monkeypatch, capsys):
    tools, csvs = tmp_path / "bin", tmp_path / "csvs"
    tools.mkdir(), csvs.mkdir()
    (csvs / "slow.csv").write_text(SLOW)
    (csvs / "fast.csv").write_text(FAST)
    fake = tools / "ncu"
    fake.write_text(FAKE_NCU.format(python=sys.executable, log=str(tmp_path / "calls.jsonl"), csvs=str(csvs)))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(launch, "cuda_available", lambda: True)
    reports = tmp_path / "reports"
    code = runner.main(["amp", "--workloads", "churn", "--smoke", "--data", "synthetic", "--reports-dir", str(reports),
                        "--top", "3"])
    out = capsys.readouterr().out
    assert code == 0, out
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert [c["twin"][2] for c in calls] == ["recipes.amp.churn_slow", "recipes.amp.churn_fast"]
    for c in calls:
        assert c["step"] == "1" and c["ncu"][:3] == ["--profile-from-start", "off", "--target-processes"]
        assert ",".join(ncu.METRICS) in c["ncu"] and "--nvtx" not in c["ncu"]
        assert c["twin"][c["twin"].index("--steps") + 1] == "2" and "--smoke" in c["twin"]
    md = (reports / "ncu_amp.md").read_text()
    assert "## churn" in md and "every kernel of timed step 1" in md and "FusedAdamMathFunctor" in md
    assert "kernel launches profiled | 4 | 2 |" in md
    csv_files = sorted(p.name for p in (reports / "results" / "ncu" / "amp").rglob("*.csv"))
    assert csv_files == ["churn_fast.csv", "churn_slow.csv"]
    assert f"report: {reports / 'ncu_amp.md'}" in out


def test_a_twin_that_fails_under_ncu_is_named_and_the_report_left_alone(tmp_path, monkeypatch, capsys):
    _stand_in(tmp_path, monkeypatch, """\
        print("==ERROR== The application returned an error code (1).")
        sys.exit(1)
        """)
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "ncu_amp.md").write_text("the previous report\n")
    code = runner.main(["amp", "--workloads", "churn", "--smoke", "--reports-dir", str(reports)])
    err = capsys.readouterr().err
    assert code == 1
    assert "ncu-amp churn: FAILED slow: the run FAILED (exit 1)" in err and "churn_slow.log" in err
    assert "==ERROR== The application returned an error code (1)." in err
    assert "is left as it was" in err and (reports / "ncu_amp.md").read_text() == "the previous report\n"


def _stand_in(tmp_path, monkeypatch, body: str):
    tools = tmp_path / "bin"
    tools.mkdir()
    fake = tools / "ncu"
    fake.write_text(f"#!{sys.executable}\nimport pathlib, shutil, sys\nargs = sys.argv[1:]\n" + textwrap.dedent(body))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(launch, "cuda_available", lambda: True)


def test_a_step_where_ncu_profiled_nothing_says_so_with_ncus_words(tmp_path, monkeypatch, capsys, twin_json):
    _stand_in(tmp_path, monkeypatch, f"""\
        shutil.copy({str(twin_json)!r}, args[args.index("--out") + 1])  # the twin ran ...
        print("==WARNING== No kernels were profiled.")  # ... but nothing was in the window: no report
        """)
    code = runner.main(["amp", "--workloads", "churn", "--smoke", "--reports-dir", str(tmp_path / "reports")])
    err = capsys.readouterr().err
    assert code == 1 and not (tmp_path / "reports" / "ncu_amp.md").exists()
    assert ("ncu-amp churn: FAILED slow: ncu profiled no kernel in every kernel of timed step 1: "
            "==WARNING== No kernels were profiled.") in err
