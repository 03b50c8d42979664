"""The fixes `make doctor FLAGS='--try'` applies to a user's script from outside, without editing it:
what each one is, the recipe that teaches it, when it applies to what the doctor saw, and how its
effect is proven from the same evidence the doctor reads (the matmuls' dtype, the convolutions'
layout, the optimizer's ops, the loader workers' CPU time, compiled graphs, the stamped flags).

The child applies them (common.measure.fixes); the runner times them (common.runners.trials)."""
import os
from dataclasses import dataclass

from common import catalog, env
from common.analysis.results_doctor import Observation


@dataclass(frozen=True)
class Fix:
    name: str  # as --try names it
    recipe: str  # the recipe that teaches it: its README, its diff (the lines to add), its parity rule
    pair: str  # the recipe's pair whose diff shows the change
    how: str  # how the doctor applies it from outside
    gpu_only: bool = False
    needs: tuple = ()  # what the device must have (common.analysis.device), else not applicable there


# every recipe's doctor fixes (common.spec: doctor_fixes), in their places; what each is in the user's own
# script (LINES): the lesson of its recipe, written for any training loop (the recipes' diffs go through the
# cookbook's harness, `run.phase`, `data.loader`, which a user's script does not have)
_TAUGHT = sorted((f.place, recipe, f) for recipe in catalog.available() for f in catalog.spec(recipe).doctor_fixes)
FIXES = {f.name: Fix(f.name, recipe, f.pair, f.how, f.gpu_only, f.needs) for _, recipe, f in _TAUGHT}
LINES = {f.name: list(f.lines) for _, _, f in _TAUGHT}
# a fix only the tests know: its training is broken on purpose (the learning rate zeroed), so parity must fail
BROKEN = Fix("zero_lr", "fused_ops", catalog.spec("fused_ops").doctor_fixes[0].pair,
             "every optimizer's learning rate set to 0 (a test's broken fix)")


def test_fixes_on() -> bool:
    """Whether the tests' broken fix may be named: COOKBOOK_FAULT=fix:zero_lr (as faults are planted)."""
    return os.environ.get(env.FAULT_ENV, "") == f"fix:{BROKEN.name}"


def known(test_fixes: bool = False) -> dict[str, Fix]:
    return {**FIXES, **({BROKEN.name: BROKEN} if test_fixes else {})}


def applies(fix: Fix, obs: Observation) -> str | None:
    """None when the fix applies to what the diagnosis saw, else why it does not (said, never timed)."""
    r, ops = obs.result, obs.ops
    cuda = r.device == "cuda"
    if fix.gpu_only and not cuda:
        return "a GPU fix: not tried on this CPU run"
    lacking = r.env.profile.not_applicable(fix.needs) if r.env.profile else None
    if lacking:
        return lacking
    if fix.name == "workers":
        if not obs.loaders:
            return "no DataLoader seen"
        if all(loader.num_workers > 0 for loader in obs.loaders):
            return (f"not applied: the script builds its DataLoader with "
                    f"{', '.join(str(loader.num_workers) for loader in obs.loaders)} workers itself")
    elif fix.name in ("amp", "tf32"):
        if ops is not None:
            f32 = ops.matmul_dtypes.get("float32", 0) + (ops.conv_dtypes.get("float32", 0) if fix.name == "amp" else 0)
            if not f32:
                return "no float32 matmul or convolution in the profiled steps"
        if fix.name == "tf32" and r.env.tf32_matmul:
            return "TF32 matmuls are on already"
    elif fix.name in ("channels_last", "cudnn_benchmark"):
        if ops is not None and not ops.conv_layouts:
            return "no convolution in the profiled steps"
        if fix.name == "channels_last" and ops is not None and not ops.conv_layouts.get("NCHW"):
            return "its convolutions take channels_last inputs already"
        if fix.name == "cudnn_benchmark" and r.env.cudnn_benchmark:
            return "cudnn.benchmark is on already"
    elif fix.name in ("fused", "zero_lr"):
        if not obs.optimizers:
            return "no optimizer step seen"
        if fix.name == "fused" and any(f.get("fused") for f in obs.optimizer_flags.values()):
            return "its optimizer is built with fused=True already"
        if fix.name == "fused" and ops is not None and ops.optimizer in ("foreach", "fused"):
            return f"its optimizer runs {ops.optimizer} already"
    elif fix.name == "compile":
        if not obs.models:
            return "no call of a model seen"
        if r.compile and r.compile.graphs:
            return "the script compiles already"
    elif fix.name == "set_to_none":
        if obs.zero_grad != "zeroes":
            return "the script does not pass set_to_none=False" if obs.zero_grad else "no zero_grad() call seen"
    return None


def took_effect(fix: Fix, obs: Observation) -> tuple[bool, str]:
    """(whether the fixed run shows the fix at work, the evidence in words). A fix the script overrode
    (it set its own flag back, built its own workers) shows here as not taken."""
    r, ops = obs.result, obs.ops
    said = obs.fixes.get(fix.name, "")
    if said != "applied":
        return False, said or "the child did not apply it"
    if fix.name == "workers":
        workers = [loader.num_workers for loader in obs.loaders]
        ran = bool(obs.loaders) and all(loader.processes for loader in obs.loaders)
        cpu = r.timing.worker_cpu_ms_per_step  # /proc's clock ticks: 10 ms, so a light loader may read 0
        return ran and min(workers) > 0, (f"{', '.join(map(str, workers))} loader workers handed out the batches"
                                          + (f", {cpu:.1f} ms of their CPU per step" if cpu is not None else ""))
    if fix.name == "amp":
        if ops is None:
            return False, "no profiled steps to read the matmuls' dtype from"
        low = sum(ops.matmul_dtypes.get(d, 0) + ops.conv_dtypes.get(d, 0) for d in ("bfloat16", "float16"))
        total = sum(ops.matmul_dtypes.values()) + sum(ops.conv_dtypes.values())
        dtype = "fp16" if ops.matmul_dtypes.get("float16") or ops.conv_dtypes.get("float16") else "bf16"
        said = f"{low:.0f} of {total:.0f} matmuls and convolutions per step in {dtype}"
        if (ls := obs.loss_scaling) is None:
            return low > 0, said
        if ls.refused:
            return False, f"{said}; but its loss scale stopped: {ls.refused}"
        scaled = ls.steps > ls.skipped  # the scale ran: steps checked, and not every one of them dropped
        return low > 0 and scaled, (f"{said}; its loss scale {ls.first:g} -> {ls.last:g} over {ls.steps} steps, "
                                    f"{ls.skipped} skipped on overflow")
    if fix.name == "tf32":
        return bool(r.env.tf32_matmul), f"allow_tf32 {r.env.tf32_matmul} during the timed steps"
    if fix.name == "cudnn_benchmark":
        return bool(r.env.cudnn_benchmark), f"cudnn.benchmark {r.env.cudnn_benchmark} during the timed steps"
    if fix.name == "channels_last":
        if ops is None:
            return False, "no profiled steps to read the convolutions' layout from"
        nhwc, total = ops.conv_layouts.get("channels_last", 0), sum(ops.conv_layouts.values())
        return nhwc > 0 and nhwc >= total / 2, f"{nhwc:.0f} of {total:.0f} convolution inputs per step in channels_last"
    if fix.name == "fused":
        if ops is None or ops.optimizer is None:
            return False, "no profiled optimizer step to read its ops from"
        return ops.optimizer in ("foreach", "fused"), f"its step runs {ops.optimizer} ops"
    if fix.name == "compile":
        c = r.compile
        graphs = c.graphs if c else 0
        return graphs > 0, (f"{graphs} compiled graph(s), {c.graph_breaks if c else 0} graph break(s)"
                            if graphs else "no compiled graph")
    if fix.name == "set_to_none":
        seen = ops.zero_grad if ops is not None else None
        return seen == "set_to_none", f"zero_grad {seen or 'not profiled'}"
    return True, "applied (a test's fix: nothing to read)"
