"""Compile's cold start: the break-even's arithmetic and interval, and the compile cache's save, load
and refusal, on a small model compiled into empty caches (the recipe's own smoke run shares the
suite's caches: tests/conftest.py)."""
import json
import subprocess
import sys
import textwrap

import pytest

from common import compile_cache
from common.analysis import coldstart
from common.analysis.results_compare import BreakEven

from conftest import NEEDS_CXX, REPO


def test_a_compiled_twin_with_a_second_more_of_one_time_work_and_10_ms_faster_steps_pays_after_100_steps():
    b = coldstart.break_even([1.0, 1.1, 0.9], [2.0, 2.1, 1.9], [30.0, 30.5, 29.5], [20.0, 20.5, 19.5], run_steps=24)
    assert b.case == "pays after" and b.steps == pytest.approx(100, rel=1e-6)
    assert b.low < 100 < b.high
    said = coldstart.words(b)
    assert "after 100 steps" in said and "compiling costs more than it saves here" in said  # 24 < the low end


def test_the_interval_is_open_above_where_the_step_saving_may_be_nothing():
    b = coldstart.break_even([1.0, 1.1, 0.9], [2.0, 2.1, 1.9], [30.0, 40.0, 20.0], [29.0, 19.0, 39.0])
    assert b.case == "pays after" and b.high is None and "from" in coldstart.interval_text(b)


@pytest.mark.parametrize("slow_ot, fast_ot, slow_ms, fast_ms, case", [
    ([5.0, 5.1, 4.9], [1.0, 1.1, 0.9], [20.0, 20.1, 19.9], [25.0, 25.1, 24.9], "ahead until"),  # regional's trade
    ([5.0, 5.1, 4.9], [1.0, 1.1, 0.9], [20.0, 20.1, 19.9], [18.0, 18.1, 17.9], "ahead throughout"),
    ([1.0, 1.1, 0.9], [5.0, 5.1, 4.9], [20.0, 20.1, 19.9], [25.0, 25.1, 24.9], "never pays"),
    ([1.0, 3.0, 2.0], [2.0, 1.0, 3.0], [20.0, 25.0, 15.0], [21.0, 14.0, 24.0], "undecided"),
])
def test_each_way_the_twins_can_cross_is_named(slow_ot, fast_ot, slow_ms, fast_ms, case):
    b = coldstart.break_even(slow_ot, fast_ot, slow_ms, fast_ms)
    assert b.case == case
    if case == "ahead until":  # 4 s of head start lost at 5 ms a step
        assert b.steps == pytest.approx(800, rel=1e-6) and b.low < 800 < b.high


def test_one_process_each_gives_a_point_and_says_it_has_no_interval():
    b = coldstart.break_even([1.0], [2.0], [30.0], [20.0])
    assert b.steps == pytest.approx(100) and b.low is None
    assert "no interval" in coldstart.words(b)


def test_a_break_even_survives_its_json_round_trip():
    b = coldstart.break_even([1.0, 1.1], [2.0, 2.2], [30.0, 31.0], [20.0, 21.0], run_steps=10)
    assert BreakEven.from_json(json.loads(json.dumps(b.to_json()))) == b


SMALL = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from types import SimpleNamespace
    import torch
    from torch._dynamo.utils import counters
    from common import compile_cache
    from common.measure.stages import compile_stats

    def once():  # a process's life as the cold-start twin lives it: empty caches, load, compile, save
        counters.clear()
        compile_cache.fresh(SimpleNamespace(notices=[]))
        run = SimpleNamespace(pair="small", device=torch.device("cpu"), profile=SimpleNamespace(amp_dtype="float32"),
                              config=SimpleNamespace(batch_size=8, image_size=None))
        artefacts = compile_cache.Artefacts(run, folder=Path(sys.argv[1]))
        artefacts.load()
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
        with torch.no_grad():  # a forward alone: the fewest kernels to compile in C++ on a CPU
            torch.compile(model)(torch.randn(8, 16))
        artefacts.save()
        c = compile_stats()
        return {"state": artefacts.state, "hits": c.cache_hits, "misses": c.cache_misses}

    first = once()
    torch._dynamo.reset()  # what a new process has: no compiled code in memory, and (fresh) none on disk
    print(json.dumps([first, once()]))
""")


@NEEDS_CXX
def test_artefacts_saved_by_one_life_are_loaded_by_the_next_into_empty_caches_and_found_there(tmp_path):
    """Twice in one process, to save a minute of C++ compilation a second process would spend on the CPU's
    instruction-set probe; the recipe's smoke run does it across processes (tests/integration/test_recipes.py)."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "COOKBOOK_COMPILE_CACHE"}  # empty caches, as a user's
    proc = subprocess.run([sys.executable, "-c", SMALL, str(tmp_path)], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env={**env, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    cold, warm = json.loads(proc.stdout.strip().splitlines()[-1])
    said = [line for line in proc.stdout.splitlines() if line.startswith("compile cache:")]
    assert "no artefacts" in said[0] and "loaded" in said[1] and len(said) == 2
    assert not cold["state"]["loaded"] and cold["state"]["saved_bytes"] > 0 and cold["misses"] > 0
    assert warm["state"]["loaded"] and warm["state"]["bytes"] == cold["state"]["saved_bytes"]
    assert warm["hits"] > 0 and warm["misses"] == 0  # compiled code found in the loaded artefacts, none generated


def test_a_file_another_torch_built_is_refused_in_one_line_before_torch_reads_it(tmp_path, capsys, monkeypatch):
    from types import SimpleNamespace

    import torch

    run = SimpleNamespace(pair="small", device=torch.device("cpu"), profile=SimpleNamespace(amp_dtype="bfloat16"),
                          config=SimpleNamespace(batch_size=8, image_size=112))
    artefacts = compile_cache.Artefacts(run, folder=tmp_path)
    assert artefacts.graph == "batch 8, 112 px, autocast bfloat16"
    built = {**compile_cache.built_for(run.device), "graph": artefacts.graph}
    artefacts.blob.write_bytes(b"not artefacts torch could read")
    artefacts.meta.write_text(json.dumps({**built, "torch": "2.10.0"}))
    monkeypatch.setattr(torch.compiler, "load_cache_artifacts", lambda data: pytest.fail("a stale file was loaded"))
    assert artefacts.load() is False
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and f"built by torch 2.10.0, this process has {built['torch']}" in lines[0]
    assert "compiling cold" in lines[0] and artefacts.state["why"].startswith("built by torch 2.10.0")
    monkeypatch.setattr(torch.compiler, "save_cache_artifacts", lambda: (b"new", None))
    monkeypatch.setattr(compile_cache, "_compiled", lambda: 3)
    artefacts.save()  # the next process gets this build's
    assert artefacts.blob.read_bytes() == b"new" and json.loads(artefacts.meta.read_text()) == built
    artefacts.meta.write_text(json.dumps({**built, "graph": "batch 4, 64 px, autocast bfloat16"}))  # a smoke run's
    assert artefacts.load() is False and "built by graph batch 4, 64 px" in capsys.readouterr().out


def test_fresh_points_inductor_and_triton_at_an_empty_folder_of_this_process(tmp_path):
    code = ("from types import SimpleNamespace; from common import compile_cache; "
            "from torch._inductor.runtime.cache_dir_utils import cache_dir, triton_cache_dir; "
            "from torch._inductor import codecache; "
            "f = compile_cache.fresh(SimpleNamespace(notices=[])); "
            "print(f, cache_dir(), triton_cache_dir(0), codecache._HEADER_DIR, sorted(p.name for p in f.iterdir()))")
    import os

    env = {**{k: v for k, v in os.environ.items() if k not in ("COOKBOOK_COMPILE_CACHE", "TORCHINDUCTOR_CACHE_DIR")},
           "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, env=env,
                         timeout=120, check=True).stdout.split()
    folder = out[0]
    assert out[1] == folder and out[2] == f"{folder}/triton" and out[3] == f"{folder}/precompiled_headers"
    assert out[4] == "[]" and not os.path.exists(folder)  # empty, and removed at the process's end
    mine = tmp_path / "inductor"  # a user's own cache location: the fresh folder goes inside it
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         env={**env, "TORCHINDUCTOR_CACHE_DIR": str(mine)}, timeout=120, check=True).stdout.split()
    assert out[0].startswith(f"{mine}/cookbook-inductor-") and out[1] == out[0]


def test_a_shared_cache_is_said_in_the_result():
    from types import SimpleNamespace

    from common import compile_cache

    run = SimpleNamespace(notices=[])
    assert compile_cache.fresh(run) is None  # the suite's setting (tests/conftest.py)
    assert "not a cold start" in run.notices[0]


def test_a_cache_built_for_another_target_is_stale_and_the_same_build_is_not():
    here = {"torch": "2.11.0", "triton": "3.5.0", "target": "NVIDIA H100 80GB HBM3 sm_90 CUDA 13.0", "graph": "g"}
    assert compile_cache.stale(dict(here), here) is None
    h200 = {**here, "target": "NVIDIA H200 sm_90 CUDA 13.0"}  # the same sm, another name: Inductor's key differs
    assert compile_cache.stale(h200, here).startswith("built by target NVIDIA H200 sm_90")
    assert "Triton" in compile_cache.stale({**here, "triton": None}, here)



def _compiled(median, warmup_s, first_s, n=3):
    """Processes of a twin: its steps' median (ms), its warm-up's wall time, its time to first step; a
    compiled graph where warmup_s says compilation happened (above a second)."""
    from common.analysis.results_run import CompileStats

    from tests_helpers import run_result

    runs = []
    for i in range(n):
        r = run_result(ms=median * (1 + 0.01 * i))
        r.timing.warmup_s = warmup_s * (1 + 0.02 * i)
        r.timeline = {"imports": 2.0, "first step": first_s * (1 + 0.02 * i), "warm-up": first_s + 0.1}
        r.compile = CompileStats(graphs=1, graph_breaks=0, recompiles=0) if warmup_s > 1 else None
        runs.append(r)
    return runs


def test_a_compiled_pair_reports_its_cold_start_and_a_first_step_recipe_headlines_it():
    from common.runners import compare

    rule = {"what": "training loss", "early_steps": 5, "early_rtol": 0.5, "window": 5, "rtol": 0.5}
    runs = {"slow": _compiled(30.0, 0.1, 3.0), "fast": _compiled(20.0, 20.1, 23.0)}  # eager vs compiled
    entry = compare.summarize_workload(runs, rule, looks=1)
    assert entry.measure == "step" and entry.speedup.ratio == pytest.approx(1.5, rel=0.02)
    c = entry.cold
    assert c.slow_first_s[0] == 3.0 and c.first.ratio < 0.2 and c.first.verdict == "slower"  # starts later
    assert c.break_even.case == "pays after" and c.break_even.steps == pytest.approx(2000, rel=0.05)
    assert c.fresh and entry.steps is None
    first = compare.summarize_workload(runs, rule, looks=1, measure="first step")
    assert first.speedup == c.first and first.steps.ratio == entry.speedup.ratio  # the steps beside it
    from common.render.report import cold_lines

    said = "\n".join(cold_lines(entry))
    assert "slow 3.06 s (3.00-3.12), fast 23.46 s (23.00-23.92)" in said
    assert "- Break-even: the fast twin's extra" in said


def test_the_ladder_gives_its_first_compiled_rung_a_break_even_against_the_rung_below():
    from common.runners.climb import summarize

    runs = {0: _compiled(30.0, 0.1, 3.0), 1: _compiled(20.0, 20.1, 23.0)}
    table = summarize("churn", runs, [], 3, "cpu", "test").rungs
    assert table[0].break_even is None and table[1].break_even.case == "pays after"


def test_the_doctor_says_when_its_compile_try_pays_against_an_epoch_of_the_scripts_loader():
    from common.analysis.results_doctor import Trial, Trials
    from common.render.doctor import trials_section

    b = coldstart.break_even([0.1, 0.12, 0.11], [20.0, 20.5, 21.0], [30.0, 30.5, 29.5], [20.0, 20.5, 19.5],
                             run_steps=196)
    t = Trial(fix="compile", recipe="compile", how="", why="1 compiled graph(s)", verdict="faster", break_even=b)
    tried = Trials(budget_s=60, spent_s=50, rounds=3, stopped="", deterministic=True, noise="", rows=[t],
                   manual=[], headline="")
    line = next(x for x in trials_section(tried, cpu=True) if "Compilation:" in x)
    assert "the compiled script's extra" in line and "an epoch of your DataLoader (196 steps) is shorter" in line
    assert "compiling costs more than it saves here" in line


def test_the_doctors_compile_try_is_judged_against_an_epoch_of_the_scripts_loader():
    from common.analysis.results_doctor import LoaderSettings, Observation
    from common.runners import trials

    loader = LoaderSettings(batch_size=8, num_workers=0, pin_memory=False, persistent_workers=False,
                            batches_per_epoch=196)
    fixed = Observation(script="train.py", argv=[], step="optimizer", steps_seen=30, ended="stopped", stage="",
                        loaders=[loader])
    base, compiled = _compiled(30.0, 0.1, 3.0), _compiled(20.0, 20.1, 23.0)
    b = trials.break_even(base, compiled, fixed)
    assert b.case == "pays after" and b.run_steps == 196 and b.low > 196  # an epoch is too short to repay it
    assert trials.break_even(base, base, fixed) is None  # nothing compiled: no break-even to give


def test_a_loader_says_its_batches_per_epoch_where_its_dataset_has_a_length():
    import torch
    from torch.utils.data import DataLoader, IterableDataset, TensorDataset

    from common.measure.settings import loader_settings

    sized = DataLoader(TensorDataset(torch.zeros(100, 2)), batch_size=8)
    assert loader_settings(sized, next(iter(sized))).batches_per_epoch == 13

    class Stream(IterableDataset):
        def __iter__(self):
            yield from torch.zeros(4, 2)

    stream = DataLoader(Stream(), batch_size=2)
    assert loader_settings(stream, next(iter(stream))).batches_per_epoch is None


def test_more_one_time_work_and_steps_that_do_not_differ_is_said_as_no_break_even():
    """The CPU's regional pair: 4 s more one-time work, steps 1 ms apart either way."""
    b = coldstart.break_even([52.2, 50.1, 53.2], [56.3, 55.0, 57.1], [122.8, 111.3, 106.6], [123.6, 112.4, 108.4])
    assert b.case == "pays after" and b.steps is None
    said = coldstart.words(b)
    assert said.startswith("the fast twin has") and "no break-even at these processes" in said


@pytest.mark.parametrize("profile, name, cc, cuda", [("T4", "Tesla T4", (7, 5), "12.6"),
                                                     ("H100", "NVIDIA H100 80GB HBM3", (9, 0), "13.0")])
def test_a_gpus_artefacts_are_keyed_on_its_name_architecture_and_cuda(monkeypatch, profile, name, cc, cuda):
    """built_for's CUDA branch on this CPU, through stand-ins for the device a T4 and an H100 report."""
    import torch

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: cc)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    monkeypatch.setattr(torch.version, "cuda", cuda)
    target = compile_cache.built_for(torch.device("cuda"))["target"]
    assert target == f"{name} sm_{cc[0]}{cc[1]} CUDA {cuda}"
