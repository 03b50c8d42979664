"""make tour: the plan (each recipe's main pair), the deadline on a simulated clock, the bundle's limits,
the resume, a tour killed mid-pair, and make finalize rendering what make recipe-<name> renders."""
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from common import catalog
from common.analysis import device
from common.runners import finalize, tour

from conftest import REPO


def test_every_recipe_names_its_main_pair_in_one_place():
    for recipe in catalog.available():
        pairs = catalog.workloads(recipe)
        assert catalog.main_pair(recipe) in pairs
        assert (len(pairs) == 1) != (catalog.spec(recipe).main is not None), recipe  # main where there is a choice
    assert catalog.main_pair("amp") == "resnet18" and catalog.main_pair("cuda_graphs") == "churn"


def test_the_plan_is_the_noise_floor_then_every_single_gpu_main_pair_in_the_order_a_reader_needs():
    plan, skipped = tour.legs(device.SIMULATED["H100"], 1)
    names = [leg.name for leg in plan]
    assert names[0] == "aa" and plan[0].aa and (plan[0].recipe, plan[0].pair) == ("amp", "churn")
    assert names[1:4] == ["amp", "dataloader", "sync_removal"]  # the design card's techniques first
    assert names[-2:] == ["cold_start", "serving"] and plan[-1].served and plan[-2].fresh
    assert "precision" in names and not any(n.startswith(("ddp", "fsdp")) for n in names)
    assert skipped["fsdp"].startswith("data-parallel")
    t4, why = tour.legs(device.SIMULATED["T4"], 1)
    assert {"precision", "channels_last"} <= set(why) and "precision" not in [leg.name for leg in t4]


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def run_tour(tmp_path, monkeypatch, costs, budget, clock=None, commit="abc123"):
    """The tour over `costs` (leg -> seconds it takes), on a simulated clock, no process started."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    ledger = tmp_path / "ledger.json"
    ledger.write_text(json.dumps({"default": {"leg_overhead": 0, "churn smoke": 1, "resnet18 smoke": 1,
                                              "serving smoke": 6, "setup smoke": 0}, "devices": {}}))
    monkeypatch.setattr(tour, "LEDGER", ledger)
    monkeypatch.setattr(tour.env, "git_commit", lambda: commit)
    monkeypatch.setattr(tour.env, "REPO_ROOT", tmp_path)
    clock = clock or Clock()
    ran = []

    def run(cmd, timeout, log, child_env=None):
        leg = cmd[cmd.index("common.runners.compare") + 1] if "--aa" not in cmd else "aa"
        took = costs[leg]
        if isinstance(took, tuple):  # (seconds, "failed"): a pair whose runner failed
            clock.now += took[0]
            ran.append(leg)
            return took[1], 1
        if took > timeout:  # still running at the deadline: stopped there
            clock.now += timeout + tour.STOP_GRACE_S
            return "cut", -15
        clock.now += took
        ran.append(leg)
        return "ok", 0

    only = ",".join(costs)
    code = tour.tour(["--smoke", "--rounds", "1", "--budget", str(budget), "--only", only, "--no-zygote",
                      "--bundle", str(tmp_path / "bundle")], clock=clock, run=run, check=lambda *a: None)
    return code, ran, clock


def test_a_pair_starts_only_when_its_predicted_cost_fits_and_one_at_the_deadline_is_dropped(tmp_path, monkeypatch,
                                                                                         capsys):
    # predicted: 2 s each (2 processes at 1 s), serving 6 s; folded_ops really takes 9 s, past the deadline
    costs = {"aa": 2, "amp": 2, "folded_ops": 9, "set_to_none": 2, "serving": 6}
    code, ran, clock = run_tour(tmp_path, monkeypatch, costs, budget=8)
    out = capsys.readouterr().out
    assert ran == ["aa", "amp"] and code == 0
    assert "cut   folded_ops/churn at the deadline" in out and clock.now - 1000 <= 8 + tour.STOP_GRACE_S
    legs = json.loads((tmp_path / "bundle" / "tour.json").read_text())["legs"]
    assert list(legs) == ["aa", "amp"]  # folded_ops dropped whole; nothing started after the deadline
    # room for the first two only by prediction: serving (6 s) waits for the next sitting, never started
    code, ran, _ = run_tour(tmp_path / "b", monkeypatch, {"aa": 2, "amp": 2, "serving": 6}, budget=5)
    out = capsys.readouterr().out
    assert ran == ["aa", "amp"] and "plan  no sitting of 5 s holds serving/churn (~6 s): ARGS='--budget 6'" in out
    assert "plan  the whole tour needs 1 sitting(s) of 5 s on CPU smoke (and longer ones for 1 pair(s))" in out
    assert "tour: not measured: serving/churn (a longer sitting)" in out
    # with room for it in a second sitting, it is named for the next one
    code, ran, _ = run_tour(tmp_path / "c", monkeypatch, {"aa": 2, "amp": 2, "serving": 6}, budget=7)
    out = capsys.readouterr().out
    assert ran == ["aa", "amp"] and "plan  next sitting: serving/churn (~6 s)" in out
    assert "plan  the whole tour needs 2 sitting(s) of 7 s on CPU smoke" in out
    assert "tour: not measured: serving/churn (the next sitting)" in out


def test_another_sitting_measures_only_what_the_bundle_lacks_and_never_mixes_commits(tmp_path, monkeypatch, capsys):
    costs = {"aa": 2, "folded_ops": 2, "set_to_none": 2}
    _, ran, _ = run_tour(tmp_path, monkeypatch, costs, budget=5)
    assert ran == ["aa", "folded_ops"]  # set_to_none's predicted 2 s did not fit the 1 s left
    _, ran, _ = run_tour(tmp_path, monkeypatch, costs, budget=5)
    assert ran == ["set_to_none"] and capsys.readouterr().out.count("have  ") == 2
    with pytest.raises(tour.CookbookError, match="holds a tour of CPU smoke at abc123"):
        run_tour(tmp_path, monkeypatch, costs, budget=5, commit="def456")


def test_the_bundle_is_at_most_8_files_of_the_limit_each_and_says_what_it_left_out(tmp_path):
    root = tmp_path / "reports"
    names = []
    for i in range(12):  # incompressible: 12 x 300 KB against volumes of 1 MB, 7 at most
        kind = "traces" if i % 2 else "results"
        path = root / kind / f"f{i}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(300_000))
        names.append(f"{kind}/f{i}.bin")
    volumes, left_out = tour.pack(root, names, limit=1_000_000, most=3)
    assert len(volumes) <= 3 and all(len(v) <= 1_000_000 for v in volumes)
    packed = [m for v in volumes for m in tarfile.open(fileobj=__import__("io").BytesIO(v)).getnames()]
    assert sorted(packed + left_out) == sorted(names) and left_out
    assert all(n.startswith("traces/") for n in left_out)  # results first: the traces give way


@pytest.mark.xdist_group("tour-lock")  # a tour as a process takes the checkout's lock
def test_a_tour_killed_mid_pair_keeps_every_finished_pair_and_finalize_renders_it_as_compare_does(tmp_path,
                                                                                                   monkeypatch):
    bundle = tmp_path / "bundle"
    proc = subprocess.Popen([sys.executable, "-m", "common.runners.tour", "--smoke", "--rounds", "1", "--only",
                             "cuda_graphs,folded_ops", "--data", "synthetic", "--bundle", str(bundle)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines = []
    for line in proc.stdout:  # the first pair's line, then kill everything at once, mid second pair
        lines.append(line)
        if line.startswith("cuda_graphs/churn"):
            time.sleep(1.0)
            os.killpg(proc.pid, signal.SIGKILL)
            break
    proc.wait(timeout=60)
    assert any(x.startswith("cuda_graphs/churn") for x in lines), "".join(lines)
    manifest = json.loads((bundle / "tour.json").read_text())
    assert list(manifest["legs"]) == ["cuda_graphs"] and len(list(bundle.iterdir())) <= tour.MAX_FILES
    reports = tmp_path / "reports"
    assert finalize.finalize([str(bundle), "--reports-dir", str(reports)]) == 0
    md = (reports / "cuda_graphs.md").read_text()
    assert "Parity of the training loss (passed)" in md and str(reports) in md
    from common.analysis.results import read_result
    from common.analysis.results_compare import Comparison
    from common.analysis.results_run import RunResult
    from common.render import report

    # the children left their traces unread (the GPU's seconds); finalize read them into the evidence
    run = read_result(next((reports / "results" / "cuda_graphs").glob("*/churn_slow_r1.json")), RunResult)
    assert run.evidence is None and Path(run.unread.trace).is_relative_to(reports)
    done = read_result(reports / "results" / "cuda_graphs" / "comparison.json", Comparison).workloads["churn"]
    assert done.slow.unread is None and done.slow.evidence.ops_per_step > 0 and "### Profiler evidence" in md
    # a trace too large for the bundle is read where it was written, before it is left out: its evidence stays
    tour_reports = Path(manifest["reports_dir"])
    assert '"unread"' in (tour_reports / "results" / "cuda_graphs" / "comparison.json").read_text()
    monkeypatch.setattr(tour, "VOLUME_BYTES", 20_000)
    tour.write_bundle(tmp_path / "small", manifest, tour_reports)
    small = json.loads((tmp_path / "small" / "tour.json").read_text())
    assert any(n.startswith("traces/cuda_graphs/") for n in small["left_out"])
    assert '"unread"' not in (tour_reports / "results" / "cuda_graphs" / "comparison.json").read_text()
    # what make recipe-cuda_graphs renders from the same results (compare.finish -> report.render)

    again = tmp_path / "again"
    report.render(read_result(reports / "results" / "cuda_graphs" / "comparison.json", Comparison), again)
    assert (again / "cuda_graphs.md").read_text().replace(str(again), str(reports)) == md


def test_a_served_pairs_line_is_its_reports_headline(tmp_path):
    leg = tour.Leg("serving", "serving", "churn", served=True)
    (tmp_path / "serving.md").write_text("# Serving\n\n## churn\n\n**1.80x faster (95% 1.7-1.9) in the rate sustained "
                                         "within the SLA.** SLA rate ...\n")
    line = tour.pair_line(leg, None, 23, 333, tour.served_verdict(tmp_path, leg))
    assert line.endswith("1.80x faster (95% 1.7-1.9) in the rate sustained within the SLA, 23 s, 333 s left")


def test_on_a_gpu_the_runners_read_the_sittings_probe_and_fork_without_the_cpu_warm_up(monkeypatch):
    """The CUDA branches, on a CPU through a simulated H100: the runners below the tour take the GPU count,
    the profile and the ceilings from COOKBOOK_DEVICE_SEEN (no probe child), and the fork server a GPU
    sitting starts skips the C++ backend's warm-up; a GPU's bundle is named after the GPU."""
    from common.runners import launch

    h100 = device.SIMULATED["H100"]
    monkeypatch.setenv("COOKBOOK_DEVICE_SEEN", json.dumps({"gpus": 1, "profile": h100.to_json(), "ceiling": True}))
    monkeypatch.delenv("COOKBOOK_DEVICE_PROFILE", raising=False)
    launch.cuda_device_count.cache_clear()
    launch.device_profile.cache_clear()

    def no_child(*args, **kwargs):
        raise AssertionError(f"a probe child was started: {args}")

    monkeypatch.setattr(launch.subprocess, "run", no_child)
    try:
        assert launch.cuda_device_count() == 1 and launch.device_profile(True).name == h100.name
        launch.ensure_ceiling(True)
    finally:
        launch.cuda_device_count.cache_clear()
        launch.device_profile.cache_clear()
    started = []

    class Server:
        def __init__(self, cmd, **kwargs):
            started.append(cmd)
            read, write = os.pipe()  # a pipe, as a real server's: the runner waits on it with select
            os.write(write, b"ready\n")
            os.close(write)
            self.stdout, self.pid = open(read), -1

    monkeypatch.setattr(launch.subprocess, "Popen", Server)
    monkeypatch.setattr(launch, "stop_group", lambda proc, grace: None)
    monkeypatch.delenv("COOKBOOK_ZYGOTE", raising=False)
    for cuda, compiles in ((True, True), (False, True), (False, False)):
        with launch.warm_server(cuda, compiles):
            assert os.environ["COOKBOOK_ZYGOTE"].endswith("socket")
        assert ("--no-cpu-inductor" in started[-1]) == (cuda or not compiles)  # a GPU's children use Triton
    real = device.DeviceProfile("cuda", "NVIDIA H100 80GB HBM3", [9, 0], 85.0)
    assert tour.device_key(real, False) == "NVIDIA H100 80GB HBM3" and tour.device_key(h100, False) == "CPU"


def test_gpu_check_on_a_gpu_runs_one_target_at_a_time_and_its_tests_with_fresh_children(tmp_path):
    from common.runners import checks

    tests = next(t for t in checks.targets(False, tmp_path) if t.name == "tests")
    assert tests.env == {"COOKBOOK_ZYGOTE": "0"} and "-v" in tests.cmd
    assert next(t for t in checks.targets(True, tmp_path) if t.name == "tests").env is None
    assert tour.parse_args(["--check"]).jobs is None
    assert (checks.default_jobs(False), checks.default_jobs(True)) == (1, 4)  # a GPU, a CPU


def test_a_primed_pair_is_predicted_with_its_priming_process_at_its_recipes_own_default():
    """cold_start compiles in every process (about a minute on a GPU, not a ResNet-18 process's 18 s),
    and its cache pair runs one priming process before its rounds."""
    ledger = {"default": {"leg_overhead": 3.0, "resnet18 process": 18.0, "cold_start process": 60.0}, "devices": {}}
    cache = tour.Leg("cold_start", "cold_start", "resnet18_cache")
    regional = tour.Leg("cold_start", "cold_start", "resnet18_regional")
    amp = tour.Leg("amp", "amp", "resnet18")
    assert tour.predicted(cache, ledger, "NVIDIA H100", 3).seconds == 3.0 + 7 * 60.0
    assert tour.predicted(regional, ledger, "NVIDIA H100", 3).seconds == 3.0 + 6 * 60.0
    assert tour.predicted(amp, ledger, "NVIDIA H100", 3).seconds == 3.0 + 6 * 18.0


def _small_bundle(tmp_path) -> Path:
    root = tmp_path / "work"
    (root / "results" / "amp").mkdir(parents=True)
    (root / "results" / "amp" / "comparison.json").write_text("{}")
    manifest = {"schema": 1, "device": "NVIDIA H200", "commit": "abc", "reports_dir": str(root), "costs": {},
                "legs": {"amp": {"recipe": "amp", "pair": "resnet18", "aa": False, "seconds": 1.0, "processes": 2,
                                 "line": "amp/resnet18 ...", "comparison": "results/amp/comparison.json",
                                 "files": ["results/amp/comparison.json"]}}}
    tour.write_bundle(tmp_path / "bundle", manifest, root)
    return tmp_path / "bundle"


@pytest.mark.parametrize("damage, said", [
    ("truncate", "volume pairs-1.tar.gz is damaged"), ("remove", "volume pairs-1.tar.gz is missing"),
    ("no key", "not a whole tour manifest (no legs.amp.files)"), ("json", "not a whole tour manifest"),
    ("old truncated", "volume pairs-1.tar.gz is damaged (")])
def test_finalize_refuses_a_damaged_bundle_in_one_line_and_writes_nothing(tmp_path, damage, said):
    bundle = _small_bundle(tmp_path)
    volume, manifest_path = bundle / "pairs-1.tar.gz", bundle / "tour.json"
    manifest = json.loads(manifest_path.read_text())
    assert manifest["sha256"]["pairs-1.tar.gz"] and tour.check_volumes(bundle, manifest) is None
    if damage in ("truncate", "old truncated"):
        volume.write_bytes(volume.read_bytes()[:40])  # an interrupted download
    if damage == "old truncated":  # a bundle written before the checksums: read to its end instead
        manifest.pop("sha256")
        manifest_path.write_text(json.dumps(manifest))
    if damage == "remove":
        volume.unlink()
    if damage == "no key":
        manifest["legs"]["amp"].pop("files")
        manifest_path.write_text(json.dumps(manifest))
    if damage == "json":
        manifest_path.write_text('{"device": "NVIDIA H200", "legs": ')
    reports = tmp_path / "reports"
    proc = subprocess.run([sys.executable, "-m", "common.runners.finalize", str(bundle), "--reports-dir",
                           str(reports)], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and said in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not reports.exists()


def _committed_ledger():
    return tour.read_ledger(REPO / "reports" / "tour_ledger.json")


@pytest.mark.parametrize("name", ["T4", "A100", "H100"])
def test_the_plan_on_a_simulated_gpu_says_what_fits_what_is_next_and_how_many_sittings(name):
    """What fits a 480 s sitting on each class, from the committed ledger's figures, in reader order; the rest
    is named for later sittings and their number is said; every recipe is planned or said left out, and why."""
    profile = device.SIMULATED[name]
    plan, skipped = tour.legs(profile, 1)
    cls = tour.sitting.gpu_class(profile.name, profile.capability)
    ledger = _committed_ledger()
    ceilings = tour.sitting.DATASHEET[cls]  # until a sitting there measures them
    schedule = tour.sitting.schedule(plan, lambda leg: tour.predicted(leg, ledger, profile.name, 3, {}, ceilings, cls),
                                 480, tour.setup_s(ledger, profile.name))
    now, later = [leg.name for leg, _ in schedule.now], [leg.name for leg, _ in schedule.later]
    assert now[0] == "aa" and sum(c.seconds for _, c in schedule.now) <= 480 - schedule.setup_s
    assert set(now) | set(later) | {leg.name for leg, _ in schedule.never} == {leg.name for leg in plan}
    assert set(now) | set(later) | set(skipped) | {leg.name for leg, _ in schedule.never} >= set(catalog.available())
    assert schedule.sittings >= 2 and later  # the whole tour does not fit one 480 s sitting on any of them
    order = [leg.name for leg in plan]
    assert now == [n for n in order if n in now]  # taken in the reader's order, never reshuffled
    said = "\n".join(tour.sitting.schedule_lines(schedule, f"{profile.name} ({cls} class)"))
    assert f"the whole tour needs {schedule.sittings} sitting(s) of 480 s on {profile.name}" in said
    if name == "T4":  # its steps about 9x slower, a third of them kept by its caps: fewer pairs fit than on an H100
        h100 = tour.sitting.schedule(tour.legs(device.SIMULATED["H100"], 1)[0],
                                 lambda leg: tour.predicted(leg, ledger, "H100", 3), 480, 30.0)
        assert len(schedule.now) < len(h100.now) and now == ["aa", "amp"]
        assert cls == "T4" and "precision" in skipped
        uncapped = tour.predicted(tour.Leg("amp", "amp", "resnet18"), ledger, profile.name, 3, {}, ceilings, None)
        capped = tour.predicted(tour.Leg("amp", "amp", "resnet18"), ledger, profile.name, 3, {}, ceilings, cls)
        assert capped.seconds < 0.7 * uncapped.seconds


def test_predictions_come_from_the_bundles_own_pairs_then_the_ledger_then_a_scaled_default():
    ledger = {"default": {"leg_overhead": 0.0, "resnet18 process": 18.0, "churn process": 15.0},
              "devices": {"GPU X": {"amp": 20.0, "fused_ops": 10.0}},
              "reference": {"fp32_tflops": 50.0, "bandwidth_gbs": 4000.0}}
    amp, fused = tour.Leg("amp", "amp", "resnet18"), tour.Leg("fused_ops", "fused_ops", "resnet18")
    channels = tour.Leg("channels_last", "channels_last", "resnet18")
    assert tour.sitting.per_process(amp, ledger, "GPU X", {"amp": 30.0}, None) == tour.sitting.Cost(30.0, "this bundle")
    # the ledger's figure, scaled by how this sitting's pairs compared with it (30 against 20: 1.5x)
    ledgers = tour.sitting.per_process(fused, ledger, "GPU X", {"amp": 30.0}, None)
    assert ledgers == tour.sitting.Cost(15.0, "the ledger")
    # a default, scaled by this device's ceilings against the reference's (a quarter of each: its steps 4x
    # slower, the whole process as much where all of it runs on the device), never below 1x
    slow = {"fp32_tflops": 12.5, "bandwidth_gbs": 1000.0}
    assert tour.sitting.per_process(channels, ledger, "GPU X", {}, slow) == tour.sitting.Cost(72.0, "default")
    ledger["reference"]["device_share"] = 0.2  # a fifth of a process on the device: 0.8 + 0.2 x 4 = 1.6x
    assert tour.sitting.per_process(channels, ledger, "GPU X", {}, slow).seconds == pytest.approx(18.0 * 1.6)
    fast = {"fp32_tflops": 100.0, "bandwidth_gbs": 8000.0}
    assert tour.sitting.per_process(channels, ledger, "GPU X", {}, fast).seconds == 18.0


def test_the_deadline_counts_from_the_commands_start(tmp_path, monkeypatch, capsys):
    """The device's probes (20-40 s on a cold GPU) are the sitting's time too: 3 s of probing leave 5 of 8."""
    clock = Clock()
    real = tour.launch.device_profile

    def probing(cuda):
        clock.now += 3.0
        return real(cuda)

    monkeypatch.setattr(tour.launch, "device_profile", probing)
    code, ran, _ = run_tour(tmp_path, monkeypatch, {"aa": 2, "amp": 2, "folded_ops": 2, "set_to_none": 2}, budget=8,
                            clock=clock)
    assert ran == ["aa", "amp"], ran  # 8 s from the start, less 3 s of probes: two pairs of 2 s, not three
    assert "after ~3 s of setup" in capsys.readouterr().out


def test_a_failed_pair_served_or_not_is_never_kept_and_its_seconds_never_reach_the_ledger(tmp_path, monkeypatch,
                                                                                          capsys):
    code, ran, _ = run_tour(tmp_path, monkeypatch, {"aa": 2, "amp": (2, "failed"), "serving": (6, "failed")},
                            budget=30)
    out = capsys.readouterr().out
    assert ran == ["aa", "amp", "serving"] and code == 1
    manifest = json.loads((tmp_path / "bundle" / "tour.json").read_text())
    assert list(manifest["legs"]) == ["aa"] and list(manifest["costs"]) == ["aa"]
    assert "serving/churn                failed, 6 s" in out and ": not kept (exit 1; log " in out
    manifest["device"], manifest["costs"]["serving"] = "NVIDIA H200", 99.0  # a cost without its kept pair
    ledger = tmp_path / "ledger.json"
    assert finalize.merge_ledger(manifest, ledger)
    assert "serving" not in tour.read_ledger(ledger)["devices"]["NVIDIA H200"]
    # a recipe pair whose processes all ran and whose parity failed is a finding, kept; one whose processes
    # failed is not
    from common.analysis import aggregate, stats
    from common.analysis.results_compare import Comparison, WorkloadComparison

    from tests_helpers import run_result

    entry = WorkloadComparison(slow=aggregate.aggregate([run_result()]), fast=aggregate.aggregate([run_result()]))
    entry.speedup = stats.speedup([10.0, 10.1], [10.0, 10.2])
    found = Comparison(recipe="amp", title="AMP", evidence_keys=[], smoke=True, device="cpu", command="", aa=False,
                       results_dir="", workloads={"resnet18": entry}, failures=[])
    leg = tour.Leg("amp", "amp", "resnet18")
    assert tour.measured(leg, found, "failed") and not tour.measured(leg, None, "failed")
    assert not tour.measured(tour.Leg("serving", "serving", "churn", served=True), found, "failed")


def test_the_served_pair_without_its_packages_is_left_out_naming_them(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in ("uvicorn", "pydantic")
                        else real(name, *a))
    plan, skipped = tour.legs(device.SIMULATED["H100"], 1)
    assert "serving" not in [leg.name for leg in plan]
    assert skipped["serving"].startswith("its HTTP endpoint needs uvicorn, pydantic, not installed here")


def test_a_fresh_recipes_processes_start_fresh_under_the_tour(monkeypatch):
    monkeypatch.setenv("COOKBOOK_ZYGOTE", "/tmp/socket")
    plan, _ = tour.legs(device.SIMULATED["H100"], 1)
    cold = next(leg for leg in plan if leg.name == "cold_start")
    assert cold.fresh and "COOKBOOK_ZYGOTE" not in tour.leg_env(cold)
    amp = next(leg for leg in plan if leg.name == "amp")
    assert not amp.fresh and tour.leg_env(amp)["COOKBOOK_ZYGOTE"] == "/tmp/socket"


def test_a_gpu_class_caps_the_steps_a_process_costs(tmp_path):
    t4, h100 = device.SIMULATED["T4"], device.SIMULATED["H100"]
    assert tour.sitting.gpu_class("Tesla T4", [7, 5]) == "T4"
    assert tour.sitting.gpu_class("NVIDIA H200", [9, 0]) == "H200"
    assert tour.sitting.gpu_class("NVIDIA B200", [10, 0]) == "H100"  # by capability where the name says none
    assert tour.sitting.gpu_class("NVIDIA RTX 6000 Ada", [8, 9]) == "L4"
    assert tour.sitting.gpu_class(t4.name, t4.capability) == "T4"
    args = tour.parse_args(["--device", "cuda"])
    cmd = tour.leg_command(tour.Leg("amp", "amp", "resnet18"), args, tmp_path, "T4")
    assert cmd[cmd.index("--") + 1:] == ["--steps", "30", "--warmup", "5"]
    assert "--" not in tour.leg_command(tour.Leg("amp", "amp", "resnet18"), args, tmp_path,
                                        tour.sitting.gpu_class(h100.name, h100.capability))


def test_the_next_tour_stops_what_a_killed_tour_left_running(tmp_path):
    """A tour SIGKILLed mid-pair leaves its runner's process group on the GPU: the next stops it, and leaves a
    pid the system has since given to another program alone."""
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "common.runners.compare"],
                              start_new_session=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    try:
        pidfile = tmp_path / ".running.json"
        pidfile.write_text(json.dumps([orphan.pid, other.pid, 999999999]))
        assert tour.stop_orphans(pidfile) == [orphan.pid]
        assert orphan.wait(timeout=10) == -signal.SIGKILL and other.poll() is None and not pidfile.exists()
    finally:
        for p in (orphan, other):
            p.kill()
            p.wait()


def test_the_parent_decides_the_data_once_and_its_children_never_probe_a_network_that_drops_traffic(tmp_path,
                                                                                                      monkeypatch):
    """A network that drops traffic, made on loopback: a proxy that accepts and never answers. The tour's
    parent probes once (its own short time-out here) and falls back to the synthetic CSV; a child started as
    the tour starts them asks the network nothing (each child lost 10 s to that probe), and its result says
    the source the parent decided."""
    import functools
    import socket
    import threading

    from common.runners import launch
    from common.workloads import datasource

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    seen = []

    def accept():
        while True:
            try:
                seen.append(server.accept()[0])  # accepted, never answered
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    import urllib.request

    # an opener the process built before (an earlier request): it read the proxy settings then, without these
    monkeypatch.setattr(urllib.request, "_opener", urllib.request.build_opener())
    proxy = f"http://127.0.0.1:{server.getsockname()[1]}"
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.setenv(name, proxy)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.setenv("COOKBOOK_OFFLINE", "")
    monkeypatch.setenv(datasource.DATA_DECIDED_ENV, "")  # the decision below is put back after the test
    monkeypatch.setenv("COOKBOOK_DATA_DIR", str(tmp_path / "data"))  # a fresh clone's: nothing cached
    monkeypatch.setattr(datasource, "reachable", functools.partial(datasource.reachable, seconds=1))
    try:
        tour.prepare_data([tour.Leg("amp", "amp", "churn")], tour.parse_args(["--smoke"]))
        assert len(seen) == 1  # the parent's one probe of kaggle.com
        out = tmp_path / "child.json"
        outcome = launch.child(["-m", "recipes.amp.churn_slow"], ["--smoke", "--steps", "1", "--warmup", "1",
                                                                  "--profile-steps", "0", "--device", "cpu"], out,
                               timeout=120)
        assert outcome.kind == "ok", outcome.tail
        assert len(seen) == 1  # the child probed nothing
        source = json.loads(out.read_text())["data_source"]
        assert source["kind"] == "synthetic" and "kaggle.com unreachable" in source["note"]
    finally:
        server.close()
        for conn in seen:
            conn.close()


def test_a_second_tour_from_one_checkout_is_refused_while_the_first_runs(tmp_path, monkeypatch):
    """The next tour stops only what a dead tour left: a live one holds its lock, and a second is refused."""
    from common.files import file_lock

    with file_lock(tmp_path / "reports" / "results" / "tour" / ".running.lock"):
        with pytest.raises(tour.CookbookError, match="another make tour is running from this checkout"):
            run_tour(tmp_path, monkeypatch, {"aa": 2}, budget=5)
    code, ran, _ = run_tour(tmp_path, monkeypatch, {"aa": 2}, budget=5)
    assert code == 0 and ran == ["aa"]


def test_on_a_simulated_t4_the_tour_measures_its_ceilings_plans_from_them_and_caps_its_steps(tmp_path, monkeypatch,
                                                                                              capsys):
    """The tour's CUDA branches on a CPU: a T4's ceilings measured before the plan (which scales the H200's
    defaults by them: without them the plan would read ~66 s), its class's step caps on ResNet-18's pair only."""
    from common.runners import launch

    t4, calls = device.SIMULATED["T4"], []
    cache = tmp_path / "ceilings.json"

    def measure(cuda):
        calls.append(cuda)
        cache.write_text(json.dumps({"Tesla T4 | torch 2.11.0": {"fp32_tflops": 8.1, "bandwidth_gbs": 320.0}}))

    monkeypatch.setattr(launch, "use_cuda", lambda wanted: True)
    monkeypatch.setattr(launch, "device_profile", lambda cuda: t4)
    monkeypatch.setattr(launch, "cuda_device_count", lambda: 1)
    monkeypatch.setattr(launch, "ensure_ceiling", measure)
    monkeypatch.setattr(tour, "ceiling_cache", lambda: cache)
    ledger = tmp_path / "ledger.json"
    ledger.write_text(json.dumps({"default": {"leg_overhead": 0, "setup": 0, "churn process": 15.0,
                                              "resnet18 process": 18.0},
                                  "reference": {"fp32_tflops": 50.8, "bandwidth_gbs": 4205.0, "device_share": 0.2},
                                  "devices": {}}))
    monkeypatch.setattr(tour, "LEDGER", ledger)
    monkeypatch.setattr(tour.env, "git_commit", lambda: "abc123")
    monkeypatch.setattr(tour.env, "REPO_ROOT", tmp_path)
    clock, cmds = Clock(), []

    def run(cmd, timeout, log, child_env=None):
        cmds.append(cmd)
        clock.now += 1
        return "ok", 0

    code = tour.tour(["--rounds", "1", "--budget", "400", "--only", "aa,amp", "--no-zygote", "--bundle",
                      str(tmp_path / "bundle")], clock=clock, run=run, check=lambda *a: None)
    out = capsys.readouterr().out
    assert code == 0 and calls == [True] and len(cmds) == 2
    # churn (no cap): 15 s x (0.8 + 0.2 x 9.08) = 39 s a process; ResNet-18, 35 of its 115 steps kept: 24 s
    assert "plan  this sitting: 2 pair(s), ~127 s of the 400 s budget" in out, out
    assert "tour on CPU (T4 class)" in out  # a simulated profile's results stay a CPU's
    aa, amp = cmds
    assert "--" not in aa and amp[amp.index("--") + 1:] == ["--steps", "30", "--warmup", "5"]
