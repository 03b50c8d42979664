"""Automatic mixed precision: matmuls and convolutions in 16-bit, the rest in fp32."""

TITLE = "Automatic mixed precision (AMP)"
# 16-bit rounding moves each loss a little and the runs drift apart slowly; a real bug (a missing
# loss scale, a wrong cast) moves it by far more. Compared step by step over the whole run.
PARITY = {"what": "training loss, step by step", "rtol": 0.05}
# AMP speeds up the math, so the pair runs where the math dominates: at the seed's batch of 32 an
# H100 spends much of a ResNet-18 step launching kernels (see the README: `--batch-size 32`).
DEFAULTS = {"resnet18": {"cuda": {"batch_size": 128}}}
