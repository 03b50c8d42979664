"""The doctor's report: reports/doctor_<name>.md, from what the observer saw of a user's script and
the doctor's verdict; each finding links the recipe that fixes it with that recipe's measured
figure (analysis.figures, read from the reports) and the regime its sweep found. With --try, the
fixes measured on the script itself come first, and the best of them is the headline. A script that
ran out of memory gets a report of where, the allocator's figures and snapshot, and what cuts memory."""
import hashlib
import re
import textwrap
from pathlib import Path

from common import env
from common.analysis import coldstart, doctor, stats
from common.analysis.figures import Figure
from common.analysis.metrics import fmt
from common.analysis.results_doctor import DoctorVerdict, Observation, Trial, Trials
from common.analysis.results_run import OutOfMemory
from common.render import page, roofline
from common.render.diagnosis import phase_sections
from common.render.report import hta_lines

STEP_WORDS = {"optimizer": "each `optimizer.step()`", "forward": "each call of the top-level model",
              "batch": "each batch drawn from a DataLoader",
              "backward": "each `loss.backward()` (the script built no torch.optim optimizer: its framework's own "
                          "updates the weights)", "auto": "each `optimizer.step()`, else each `loss.backward()`"}

ENDED = {"stopped": "the doctor stopped the script", "script ended": "the script ended by itself",
         "script exited": "the script exited (status 0)"}


def report_name(script: Path) -> str:
    """doctor_<stem>_<6 hex of the script's path>: two main.py in two folders get two reports. A
    script inside this repository is named by its path in it, so its report has one name everywhere."""
    path = Path(script).resolve()
    stem = re.sub(r"[^A-Za-z0-9_-]+", "_", path.stem) or "script"
    key = path.relative_to(env.REPO_ROOT).as_posix() if path.is_relative_to(env.REPO_ROOT) else str(path)
    return f"doctor_{stem}_{hashlib.sha256(key.encode()).hexdigest()[:6]}"


def recipe_line(recipe: str, figures: dict[str, Figure]) -> str:
    """'[`amp`](../recipes/amp/README.md): 1.74x on resnet18 (...) (H100, date; this version); regime: ...'"""
    link = f"[`{recipe}`](../recipes/{recipe}/README.md)"
    f = figures.get(recipe)
    if f is None:
        return f"{link}: not measured on a GPU yet (`make recipe-{recipe}`)"
    text = link
    if f.pairs:
        text += f": measured {f.says()} ([report]({f.source}): {f.label()})"
    for pair, (_knob, regime, device_type) in f.regimes.items():
        where = " (a CPU sweep)" if device_type == "cpu" else ""
        text += f"; {pair}: {regime}{where} ([sweep](sweep_{recipe}.md))"
    return text


def _settings_rows(obs: Observation) -> list[str]:
    r, ops = obs.result, obs.ops
    cpu = r.device != "cuda"
    built = "; ".join(f"{name}: foreach={f.get('foreach')}, fused={f.get('fused')}"
                      for name, f in obs.optimizer_flags.items())
    rows = [("what a step is", f"{STEP_WORDS[obs.step]} ({'--step ' + obs.step})"),
            ("optimizers, as built", built or "none seen"),
            ("top-level modules called", ", ".join(obs.models) or "none seen")]
    for i, loader in enumerate(obs.loaders):
        rows.append((f"DataLoader {i + 1}", f"batch {loader.batch_size}, {loader.num_workers} workers, "
                     f"pin_memory={loader.pin_memory}, persistent_workers={loader.persistent_workers}"
                     + (f", prefetch_factor={loader.prefetch_factor}" if loader.prefetch_factor else "")))
    if not obs.loaders:
        rows.append(("DataLoader", "none seen"))
    if ops:
        per = lambda table: ", ".join(f"{k} {v:.0f}" for k, v in sorted(table.items(), key=lambda kv: -kv[1])) \
            or "none"  # noqa: E731
        rows += [("matmuls per step, by dtype", per(ops.matmul_dtypes)),
                 ("convolutions per step, by dtype", per(ops.conv_dtypes)),
                 ("convolution inputs per step, by layout", per(ops.conv_layouts)),
                 ("optimizer implementation (its ops)", (ops.optimizer or "no optimizer step profiled") + (
                     ": torch's default on a CPU (on CUDA the same code runs foreach)" if cpu and ops.optimizer ==
                     "for-loop" and not any(f.get("foreach") is False for f in obs.optimizer_flags.values())
                     else ""))]
    rows.append(("zero_grad", doctor.zero_grad_style(obs) or "no zero_grad() call seen"))
    e = r.env
    load = r.load
    rows += [("torch threads; cores this run could use", f"{e.torch_threads}; {load.cores if load else '?'}"),
             ("other processes on those cores, timed steps", (f"{load.others_cores:.2f} core(s) busy"
              + (": a busy machine (see the headline)" if load.busy else "")) if load else "not readable here")]
    rows += [("TF32 matmul / cuDNN; float32 matmul precision",
              f"{e.tf32_matmul} / {e.tf32_cudnn}; {e.float32_matmul_precision}"),
             ("cudnn.benchmark", str(e.cudnn_benchmark))]
    c = r.compile
    rows.append(("torch.compile", f"{c.graphs} graphs, {c.graph_breaks} breaks, {c.recompiles} recompiles"
                 if c and c.graphs else "not used"))
    return ["| setting | seen |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows]


def speedup_text(t: Trial) -> str:
    """'1.74x faster (95% interval 1.62-1.85, 5 processes each)' (stats.describe), or '-' where it was not timed."""
    return stats.describe(t.speedup) if t.speedup else "-"


def trial_result(t: Trial) -> str:
    """A trial's outcome in one line: its speedup and verdict, or why it has none."""
    if not t.speedup:
        return f"{t.verdict}: {t.why}"
    return speedup_text(t) + (", but parity FAILED" if "parity FAILED" in t.verdict else "")


def _memory(t: Trial) -> str:
    if t.memory_before_mb is None:
        return "-"
    what = "" if t.memory_kind == "cuda_allocator" else " (peak RSS)"
    return f"{t.memory_before_mb:.0f} -> {t.memory_after_mb:.0f} MB{what}"


def trials_section(tr: Trials, cpu: bool) -> list[str]:
    """'Tried on your script': each fix against the unchanged script, measured as a recipe is."""
    where = " All times are CPU times; the GPU-only fixes are not tried on a CPU." if cpu else ""
    lines = ["## Tried on your script", "",
             f"Each fix was applied from outside (the script file is unchanged) and timed against the unchanged "
             f"script in fresh processes, alternating, {tr.rounds} round(s) ({tr.stopped}; budget "
             f"{tr.budget_s:.0f} s, {tr.spent_s:.0f} s spent). Speedup: the median of the per-process figures "
             f"(each the timed stretch's time over its steps), "
             f"with its 95% interval over processes[^interval]. Parity: the fixed run's losses against the "
             f"unchanged run's, by the fix's recipe's rule. {tr.noise}.{where}", "",
             "| fix | how it was applied | speedup | peak memory | parity | verdict |", "|---|---|---|---|---|---|"]
    for t in tr.rows:
        speed = speedup_text(t)
        parity = "-" if t.parity_ok is None else "ok" if t.parity_ok else "FAILED"
        name = f"[`{t.fix}`](../recipes/{t.recipe}/README.md)" if t.recipe else f"{t.fix} ({', '.join(t.fixes)})"
        lines.append(f"| {name} | {t.how} | {speed} | {_memory(t)} | {parity} | {t.verdict} |")
    lines.append("")
    for t in tr.rows:
        lines.append(f"- **{t.fix}**: {t.verdict}. " + (f"Evidence it took effect: {t.why}." if t.speedup else
                                                         f"{t.why[0].upper() + t.why[1:]}." if t.why else ""))
        if t.parity:
            lines.append(f"  - Parity: {t.parity}.")
        if t.break_even is not None:
            said = coldstart.words(t.break_even, "the compiled script", "the unchanged script",
                                   "an epoch of your DataLoader ({n} steps)")
            lines.append(f"  - Compilation: {said}.")
        if t.verdict == "faster" and t.lines:
            lines += [f"  - The lines to add to your script (its recipe, `{t.recipe}`, shows them in a pair):", "",
                      "    ```python",
                      *[f"    {line}" for line in textwrap.dedent("\n".join(t.lines)).splitlines()], "    ```"]
    return lines + [""]


def render_markdown(obs: Observation, v: DoctorVerdict, figures: dict[str, Figure], command: str,
                    tried: Trials | None = None) -> str:
    r = obs.result
    e, t = r.env, r.timing
    lines = [f"# Doctor: `{env.shown_path(obs.script)}`", "", f"Headline: {tried.headline if tried else v.headline}",
             "",
             f"Generated by `{command}` on **{env.describe_device(e)}**, {e.date} (commit {e.git_commit}); "
             f"torch {e.torch}. The script ran unmodified"
             + (f" with `{' '.join(obs.argv)}`" if obs.argv else "")
             + (f", in `{env.shown_path(obs.cwd)}`" if obs.cwd else "") + f"; a step is {STEP_WORDS[obs.step]}: "
             f"{t.warmup_steps} warm-up steps, {t.summary.n} timed, "
             f"{r.evidence.profiled_steps if r.evidence else 0} profiled"
             + (", 1 FLOP-counted" if r.flops_per_step else "") + "; then "
             + ENDED.get(obs.ended, obs.ended) + ".",
             "Every measured number below comes from that run; the recipes' figures come from the reports they "
             "link. The doctor's hooks add about a microsecond of host time per module call.", ""]
    lines += [f"- Note: {n}" for n in r.notices]
    lines += [f"- Blind spot: {b}" for b in v.blind]
    if tried:
        lines += ["", *trials_section(tried, r.device != "cuda")]
    lines += ["", "## Verdict: what costs the most, measured", "",
              "Every suspect, ranked by its measured share of the step (the cost model of `make diagnose-*`), "
              "with the recipe that fixes it and what that recipe measured:", ""]
    for f in v.diagnosis.findings:
        lines.append(f"- **{f.kind}, {f.cost:.0%}**: {f.says}.")
        lines += [f"  - {recipe_line(rec, figures)}" for rec in f.recipes]
    reads = doctor.host_reads(obs)
    if reads:
        lines += ["", "What no fix from outside can change (the lines to change by hand; host reads counted over "
                      f"every measured step, {t.summary.n} timed and the profiled ones):", ""]
        lines += [f"- {m}" for m in reads]
    lines += ["", "## What the compute itself could gain", ""]
    if not v.gains:
        lines.append("Nothing the settings show: no float32-heavy matmuls, NCHW convolutions, for-loop optimizer, "
                     "zeroed gradients, host-bound GPU step or starved DataLoader seen.")
    for g in v.gains:
        lines.append(f"- **{g.kind}**: {g.says}.")
        lines += [f"  - {recipe_line(rec, figures)}" for rec in g.recipes]
    lines += ["", "## Settings seen", "", "Read from what the script ran (its DataLoaders, its optimizers' hooks, "
              "and the ops of the profiled steps, recorded with their input dtypes and strides):", ""]
    lines += _settings_rows(obs)
    lines += ["", *roofline.section([("your script", r.evidence)])] if r.evidence else []
    lines += ["", "## A second opinion on the trace", ""]
    lines += hta_lines([("profiled steps", r.evidence)], r.device != "cuda")
    lines += phase_sections(r, v.diagnosis)
    lines += [f"- First step (from the first batch or model call to the first step's end: compilation, "
              f"autotuning, lazy set-up, and whatever the script does first, an evaluation say): "
              f"{fmt(t.first_step_s, '.2f')} s; "
              f"warm-up {t.warmup_s:.2f} s in all",
              *([f"- The profiled steps' views (step breakdown, operator and kernel tables, memory, a timeline) "
                 f"in one page that needs no network: `{env.shown_path(r.evidence.page)}`"]
                if r.evidence and r.evidence.page else []),
              "- TensorBoard: `make tensorboard`, then open http://127.0.0.1:6006/#pytorch_profiler",
              "- Perfetto: open https://ui.perfetto.dev and drop the `.pt.trace.json` file on it", ""]
    if tried and any(t.speedup for t in tried.rows):
        lines += [f"[^interval]: {stats.footnote(max(t.speedup.looks for t in tried.rows if t.speedup))}", ""]
    return "\n".join(lines)


def render(obs: Observation, v: DoctorVerdict, figures: dict[str, Figure], command: str, reports_dir: Path,
           tried: Trials | None = None) -> Path:
    path = Path(reports_dir) / f"{report_name(Path(obs.script))}.md"
    page.write(path, render_markdown(obs, v, figures, command, tried))
    return path


# the recipes that cut the memory a step needs, each with what it cuts
MEMORY_RECIPES = (("checkpointing", "activations recomputed in the backward pass instead of kept"),
                  ("amp", "activations kept in 16 bits instead of 32"),
                  ("grad_accumulation", "the same effective batch in smaller micro-batches"))


def _gib(mb: float | None) -> str:
    return "-" if mb is None else f"{mb / 1024:.2f} GiB"


MEMORY_WORDS = {"cuda": "CUDA memory", "cpu": "the host's memory", "other": "its accelerator's memory"}


def oom_headline(oom: OutOfMemory) -> str:
    text = f"the script ran out of {MEMORY_WORDS[oom.device]} in its {oom.stage} (after {oom.steps_seen} steps)"
    if oom.requested_mb is not None:
        text += (f": {_gib(oom.requested_mb)} asked for with {_gib(oom.allocated_mb)} of {_gib(oom.allowed_mb)} "
                 "in its tensors")
    return text + ("; the allocator's snapshot shows what held it" if oom.snapshot else "")


def render_oom_markdown(oom: OutOfMemory, script: Path, figures: dict[str, Figure], command: str) -> str:
    e = oom.env
    where = f"**{env.describe_device(e)}**, {e.date} (commit {e.git_commit}); torch {e.torch}" if e else "this machine"
    lines = [f"# Doctor: `{env.shown_path(script)}` ran out of memory", "", f"Headline: {oom_headline(oom)}", "",
             f"Generated by `{command}` on {where}. The script ran unmodified until it ran out of memory, so "
             "nothing was timed or "
             "profiled: this report says where it ran out and what to change; once the script fits, the doctor's "
             "full report follows from the same command.", "", "## The error", "", f"`{oom.message}`", ""]
    if oom.device == "cuda" and oom.allocated_mb is not None:
        when = ("as the allocator last failed (its out-of-memory observer, in the doctor's second run)"
                if oom.at_failure else
                "as the error reached the doctor (a temporary of the failed operation may be freed by then)")
        lines += ["## The device's memory at the failure", "", f"Read {when}.", "", "| | |", "|---|---:|"]
        lines += [f"| {what} | {_gib(mb)} |" for what, mb in (
            ("the segment the allocator tried to reserve (the request, rounded up)", oom.requested_mb),
            ("in the script's tensors", oom.allocated_mb),
            ("held by PyTorch's caching allocator (tensors and cached free blocks)", oom.reserved_mb),
            ("free inside split blocks the allocator cannot release", oom.inactive_split_mb),
            ("free on the device, as CUDA said", oom.free_mb),
            ("the memory it may use (the device's, or the cap of set_per_process_memory_fraction)", oom.allowed_mb))
            if mb is not None]
        # before failing, the allocator releases its free unsplit blocks; free memory left in split ones at
        # least as large as the request was in pieces too small for it
        if (oom.requested_mb is not None and (oom.inactive_split_mb or 0) >= oom.requested_mb
                and not oom.expandable_segments):
            lines += ["", f"{_gib(oom.inactive_split_mb)} were free inside split blocks, more than the request, "
                      "yet in no piece large enough: likely fragmentation. "
                      "`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` (or `PYTORCH_ALLOC_CONF`) lets the "
                      "allocator's segments grow "
                      "instead of adding new ones."]
        lines.append("")
    lines += ["## What held the memory", ""]
    if oom.snapshot:
        lines += [f"The CUDA allocator's history from the script's first CUDA use to the error (its latest "
                  "allocations and frees, each with the Python stack that made it, the failed request among them) "
                  f"and its blocks as the error reached the doctor: `{env.shown_path(oom.snapshot)}`; to view it: "
                  f"{oom.view_snapshot}."]
    lines += [f"- {n}" for n in oom.notes] + ["", "## What cuts the memory a step needs", ""]
    lines += [f"- {what}: {recipe_line(recipe, figures)}" for recipe, what in MEMORY_RECIPES]
    lines += ["- a smaller batch: activations grow with it (`make sweep-<recipe>` shows where a recipe's "
              "throughput stops growing with the batch)", ""]
    return "\n".join(lines)


def render_oom(oom: OutOfMemory, script: Path, figures: dict[str, Figure], command: str, reports_dir: Path) -> Path:
    path = Path(reports_dir) / f"{report_name(Path(script))}.md"
    page.write(path, render_oom_markdown(oom, script, figures, command))
    return path
