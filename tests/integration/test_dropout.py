"""Dropout's randomness in a pair's parity check: CUDA draws its masks per dtype (the stand-in
dropout.DtypeMasks reproduces that on a CPU, as every simulated GPU profile does), and the harness draws
every mask as fp32's over the checked, untimed stages (dropout.SharedMasks), so that a precision change
is compared with itself, not with another dropout stream."""
import json

import pytest
import torch
import torch.nn.functional as F

from common.analysis.aggregate import RESEEDED_RTOL, parity
from common.analysis.results_run import Randomness
from common.measure.dropout import DtypeMasks, SharedMasks
from recipes import amp

from tests_helpers import run_result

X = torch.randn(64, 1024).abs() + 0.1  # no value that a 16-bit dtype rounds to zero


def drop(x, seed=0):
    torch.manual_seed(seed)
    return F.dropout(x, 0.3, training=True)


def agree(a, b) -> float:
    return ((a != 0) == (b != 0)).float().mean().item()


def test_the_stand_in_draws_other_masks_for_16_bit_inputs_as_cuda_does():
    """As on an H200 (reports/archive/h200-2026-11-27): bf16 and fp16 drop other units than fp32 under one
    seed, about as many as two independent masks share (0.7^2 + 0.3^2 = 58%); fp32 is the CPU's own."""
    with DtypeMasks():
        fp32, bf16, fp16 = drop(X), drop(X.bfloat16()), drop(X.half())
    assert torch.equal(fp32, drop(X))
    assert 0.5 < agree(fp32, bf16) < 0.7 and 0.5 < agree(fp32, fp16) < 0.7


def test_shared_masks_leave_fp32_as_it_was_and_give_every_dtype_fp32s_mask():
    """Under SharedMasks an fp32 twin draws exactly what it draws without it (the slow twin's trajectory is
    unchanged), and a 16-bit twin the same units, under CUDA's per-dtype masks too; it counts what it saw."""
    with DtypeMasks():
        native = drop(X)
        with SharedMasks() as shared:
            fp32 = drop(X)
            bf16 = drop(X.bfloat16())
            layer = torch.nn.Dropout(0.3)
            torch.manual_seed(0)
            fp16 = layer(X.half())
            assert torch.equal(F.dropout(X, 0.3, training=False), X)  # eval: untouched, not counted
    assert torch.equal(fp32, native)
    assert agree(fp32, bf16) == 1.0 and agree(fp32, fp16) == 1.0
    assert (bf16.float() - fp32).abs().max() <= 0.01 * fp32.abs().max()  # bf16's rounding of the same values
    assert shared.calls == 3 and shared.dtypes == {"float32", "bfloat16", "float16"}


def test_shared_masks_keep_fp32s_own_draw_inplace_and_in_another_layout():
    """An fp32 twin draws what it would draw natively, by the same path, whatever the layout."""
    nhwc = torch.randn(8, 16, 5, 5).abs().add(0.1).to(memory_format=torch.channels_last)
    for x, inplace in ((X, True), (nhwc, False)):
        torch.manual_seed(0)
        native = F.dropout(x.clone(), 0.3, True, inplace)
        torch.manual_seed(0)
        with SharedMasks():
            shared = F.dropout(x.clone(), 0.3, True, inplace)
        assert torch.equal(native, shared)


def trajectories(n=60, drift=0.0):
    slow, fast = run_result(losses=[1.0 / (1 + 0.02 * i) for i in range(n)]), run_result(variant="fast")
    fast.losses = [x * (1 + drift * (i >= 20)) for i, x in enumerate(slow.losses)]
    for r in (slow, fast):
        r.probe_losses = [1.0 - 0.04 * i for i in range(12)]
    slow.randomness = Randomness(shared_steps=20, calls=100, dtypes=["float32"], per_dtype=True)
    fast.randomness = Randomness(shared_steps=20, calls=100, dtypes=["bfloat16"], per_dtype=True)
    return slow, fast


def test_windows_after_the_shared_masks_are_judged_against_a_reseeded_twins_spread():
    """Where the twins' own masks differ after the shared stretch, a window 7% off (a reseeded fp32 twin's
    spread reaches 5.1%) passes at RESEEDED_RTOL; the same gap fails where the twins draw the same masks
    (same dtypes), and inside the shared stretch; a twin 25% off (one that stopped learning) fails anyway."""
    rule = amp.RECIPE.parity.rule()
    slow, fast = trajectories(drift=0.07)
    par = parity(slow, fast, rule)
    assert par.ok and par.masks_shared_until == 20 and par.rtol == RESEEDED_RTOL and par.window_rtol == rule["rtol"]
    fast.randomness.dtypes = ["float32"]
    assert not parity(slow, fast, rule).ok
    fast.randomness.dtypes = ["bfloat16"]
    slow.randomness.per_dtype = fast.randomness.per_dtype = False  # a CPU: one mask whatever the dtype
    assert not parity(slow, fast, rule).ok
    slow.randomness.per_dtype = fast.randomness.per_dtype = True
    fast.randomness.calls = 0  # the fast twin's dropout out of Python's reach (a replayed graph)
    par = parity(slow, fast, rule)  # then no step drew the same masks by construction: none is said to
    assert par.ok and par.masks_shared_until == 0 and par.early_steps == 0
    slow, fast = trajectories(drift=0.07)
    fast.losses[10:20] = [x * 1.07 for x in slow.losses[10:20]]  # inside the shared stretch
    assert not parity(slow, fast, rule).ok
    slow, fast = trajectories(drift=0.25)
    assert not parity(slow, fast, rule).ok
    slow, fast = trajectories(drift=0.0)
    slow.randomness = fast.randomness = None  # results of an older version: the rule as it was
    assert parity(slow, fast, rule).masks_shared_until is None


def test_the_early_steps_compare_only_where_the_masks_were_shared():
    slow, fast = trajectories()
    slow.randomness.shared_steps = fast.randomness.shared_steps = 3
    assert parity(slow, fast, amp.RECIPE.parity.rule()).early_steps == 3


@pytest.mark.parametrize("fault", [None, "frozen:fast"])
def test_amp_with_cudas_dropout_passes_at_the_rounding_of_bf16_and_a_frozen_twin_still_fails(tmp_path, fault):
    """amp's churn pair on a simulated H100 (CUDA's per-dtype masks, bf16): the first steps and the probe
    agree at bf16's rounding (0.08% and 1.0% at the CPU sizes), where the twins' own masks put them
    0.7-1.2% and 7-9% apart (the same run without SharedMasks); a twin that updates nothing fails."""
    from conftest import comparison_of, run_module

    env = {"COOKBOOK_DEVICE_PROFILE": "H100", **({"COOKBOOK_FAULT": fault} if fault else {})}
    proc = run_module("common.runners.compare", "amp", "--workloads", "churn", "--smoke", "--rounds", "1",
                      "--device", "cpu", "--data", "synthetic", "--reports-dir", str(tmp_path), "--",
                      "--warmup", "6", "--steps", "24", "--profile-steps", "0", env=env)
    par = comparison_of(tmp_path, "amp")["workloads"]["churn"]["parity"]
    if fault:
        assert proc.returncode == 1 and not par["ok"], proc.stderr
        return
    assert proc.returncode == 0, proc.stderr
    assert par["ok"] and par["early_steps"] == 5 and par["masks_shared_until"] == 6
    assert par["early_max_rel"] < 0.004 and par["probe_max_rel"] < 0.03, par
    found = (tmp_path / "results" / "amp").rglob("churn_*_r1.json")
    results = {p.name.split("_")[1]: json.loads(p.read_text()) for p in found}
    assert results["slow"]["randomness"]["dtypes"] == ["float32"]
    assert results["fast"]["randomness"]["dtypes"] == ["bfloat16"] and results["fast"]["randomness"]["per_dtype"]
    # each process's phase timeline, in the order it ran, its end added by the runner that waited for it
    from common.analysis.timeline import PHASES

    marks = results["slow"]["timeline"]
    assert list(marks) == [p for p in PHASES if p in marks] and {"imports", "warm-up", "timed", "exit"} <= set(marks)
    assert list(marks.values()) == sorted(marks.values())
