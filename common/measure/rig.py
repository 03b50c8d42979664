"""What the environment plants in a harness run from outside the Run's code, set up by one call in
harness.start and undone when the run closes. A user's run gets none of it:

- the tests' faults (COOKBOOK_FAULT, common.measure.faults): the batch stream wrapped, a frozen twin's
  optimizer hook, a broken serving twin's answers;
- a simulated GPU's dropout on a CPU (COOKBOOK_DEVICE_PROFILE): CUDA draws its masks per dtype, a CPU
  does not (dropout.DtypeMasks), and the run's randomness says so;
- a simulated GPU's FlexAttention on a CPU: CUDA compiles and trains it, while a CPU has no backward for
  it, compiled or not (flex_trains_here runs its eager reference, which has one);
- an A/A's second role (RUN_ENV, set by the runner under --aa): the same script as the first, so it draws
  its own dropout stream once the shared stages end, or the two roles would draw the same masks.

Each part hangs its hook on one of the Run's seams: run.batch_filter, run.answers.filter, run.after_shared."""
import contextlib

import torch

from common.analysis.results_run import Randomness
from common.measure import dropout, faults


@contextlib.contextmanager
def rig_from_env(run):
    """Plant what the environment asks for in `run` (a harness.Run, just built); undone on exit."""
    with contextlib.ExitStack() as undo:
        if run.profile.simulated and run.profile.kind == "cuda" and run.device.type != "cuda":
            undo.enter_context(dropout.DtypeMasks())
            undo.enter_context(flex_trains_here())
            run.after_shared.append(_drawn_per_dtype)
        if faults.role(run.variant)[0] != run.variant:
            run.after_shared.append(lambda randomness: _reseeded(randomness, run.seed + 1))
        planted = faults.plant(run.variant, run.pair, run.workload, lambda: run.stage)
        if planted is not None:
            undo.callback(planted.close)
            run.batch_filter, run.answers.filter = planted.stream, planted.answer
        yield run


@contextlib.contextmanager
def flex_trains_here():
    """FlexAttention with gradients on this CPU, as on the GPU it stands for. torch refuses its CPU backward
    (torch.nn.attention.flex_attention._validate_device), and Inductor generates none for a CPU, so the
    check is lifted and a compile of flex_attention gets dynamo's eager backend: its reference runs, the
    same arithmetic as the GPU kernel's with the scores whole."""
    from torch.nn.attention import flex_attention as flex

    checked, compile = flex._validate_device, torch.compile

    def compile_flex_eagerly(model=None, **options):
        if model is flex.flex_attention:
            options["backend"] = "eager"
        return compile(model, **options)

    flex._validate_device, torch.compile = (lambda query, key, value: None), compile_flex_eagerly
    try:
        yield
    finally:
        flex._validate_device, torch.compile = checked, compile


def _drawn_per_dtype(randomness: Randomness) -> None:
    randomness.per_dtype = True  # the stand-in draws as CUDA does


def _reseeded(randomness: Randomness, seed: int) -> None:
    """Another dropout stream from the end of the shared stages on, where they drew any mask."""
    if randomness.calls:
        torch.manual_seed(seed)
        randomness.reseeded_at = randomness.shared_steps
