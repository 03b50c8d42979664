"""A serving script's answers (run.log_output): where a training script logs its loss, a served batch's
answers stand in for it in the parity check, and the result keeps the first few answers as they are, so
that two twins that answer other customers, or stale requests, differ. A run learns that it serves only
once it logs an answer (in its warm-up); until then it is a training run."""
import torch

from common.analysis.results_run import ANSWERS_KEPT, RunResult


class ServedAnswers:
    """The size of what goes back to the caller, and the filter a planted broken twin puts between the
    script's answers and what is kept (common.measure.rig; a user's run keeps them as they are)."""

    def __init__(self):
        self.output_bytes: int | None = None  # one batch's answers; None until one is logged
        self.filter = lambda output: output

    @property
    def serving(self) -> bool:
        return self.output_bytes is not None

    def kept(self, output: torch.Tensor) -> torch.Tensor:
        """A copy (a served answer may sit in a reused buffer), reduced after the loop: the step pays a
        small copy, not a reduction."""
        if self.output_bytes is None:
            self.output_bytes = output.nelement() * output.element_size()  # what goes back to the caller
        return self.filter(output).detach().clone()

    def settle(self, result: RunResult, after_warm_up: list, batch_bytes: int | None) -> None:
        """A finished serving result: no learning probe; each request's answers from the warm-up's end on,
        for parity; a step's bytes are the request in and its answers out."""
        result.probe_losses = []
        result.answers = [x.float().flatten().cpu().tolist() for x in after_warm_up[:ANSWERS_KEPT]]
        result.bytes_per_step = (batch_bytes or 0) + self.output_bytes
