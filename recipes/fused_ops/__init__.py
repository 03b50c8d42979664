"""Fused ops: fewer, bigger kernels: needless elementwise ops folded away, a fused/foreach Adam."""

TITLE = "Fused and multi-tensor ops"
# The folded data are bit-identical to what the needless ops computed, and a fused or foreach Adam
# does the for-loop Adam's arithmetic in another order: the losses agree to rounding.
PARITY = {"what": "training loss", "early_steps": 5, "early_rtol": 0.001, "window": 10, "rtol": 0.02}
EVIDENCE = ("optimizer_kernels", "optimizer_ops", "optimizer_gpu_ms", "optimizer_host_ms", "kernels_per_step")
