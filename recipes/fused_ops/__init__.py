"""Fused ops: the optimizer's update in a few fused (or multi-tensor) kernels, not ~9 per tensor."""

TITLE = "Fused and multi-tensor ops"
# A fused or foreach Adam does the for-loop Adam's arithmetic in another order: the losses agree
# to rounding.
PARITY = {"what": "training loss", "early_steps": 5, "early_rtol": 0.001, "window": 10, "rtol": 0.02}
EVIDENCE = ("optimizer_kernels", "optimizer_ops", "optimizer_gpu_ms", "optimizer_host_ms", "kernels_per_step")
# the goal of this version on an H100 (common/analysis/goals.py)
GOALS = {"resnet18": {"min_speedup": 1.5}}
# ResNet-18's 62 parameter tensors at the seed's batch 32: the optimizer's launches are a large part
# of a short step there
DEFAULTS = {"resnet18": {"cuda": {"batch_size": 32}}}
