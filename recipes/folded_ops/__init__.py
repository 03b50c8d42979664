"""Folded ops: constant elementwise work done once to the data, not to every batch in the forward."""

TITLE = "Needless ops folded away"
# The folded data are bit-identical to what the needless ops computed, and the model has the same
# layers and parameters: the losses agree to rounding.
PARITY = {"what": "training loss", "early_steps": 5, "early_rtol": 0.001, "window": 10, "rtol": 0.02}
EVIDENCE = ("forward_kernels", "forward_ops", "kernels_per_step", "cpu_ms_per_step")
