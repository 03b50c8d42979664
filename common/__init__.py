"""The cookbook's shared harness: flags, timing, profiling, data, models, results and reports."""
