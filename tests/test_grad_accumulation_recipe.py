"""`make recipe-grad_accumulation` in smoke mode: the same effective batch from micro-batches."""
from recipes.grad_accumulation import ACCUMULATE

from conftest import comparison_of


def test_grad_accumulation_pairs_keep_parity_with_the_full_batch(smoke_run):
    proc, reports = smoke_run("grad_accumulation")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for w, entry in comparison_of(reports, "grad_accumulation")["workloads"].items():
        assert entry["parity"]["ok"], (w, entry["parity"])
        # k forward and backward passes of a k-th of the batch: about the same FLOPs per step
        slow, fast = entry["slow"]["flops_per_step"], entry["fast"]["flops_per_step"]
        assert 0.95 < fast / slow < 1.05, (w, slow, fast)
        # ... in k times as many forward calls
        assert entry["fast"]["evidence"]["phases"]["forward"]["ops"] > (ACCUMULATE - 1) * \
            entry["slow"]["evidence"]["phases"]["forward"]["ops"], w
