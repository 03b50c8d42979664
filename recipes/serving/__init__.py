"""Serving: the churn model behind an HTTP endpoint under open-loop load, one forward per request
against micro-batches of an ahead-of-time compiled model (common/runners/serve.py runs it)."""

TITLE = "Serving under load"
SERVER = True  # twins are servers: common.runners.serve measures them, not the step harness
# each customer's answer, in order, against the slow twin's (both fp32; AOTInductor's fused kernels
# round a little differently): a wrong customer's answer is 0.1-0.9 off on the trained weights
PARITY = {"what": "churn probability per request", "atol": 1e-4}
PARITY_REQUESTS = {"cuda": 1024, "cpu": 512, "smoke": 128}
SLA_MS = 50.0  # p99 latency; `--sla-ms` sets another
# offered rates (requests/s) swept per twin, upwards until it falls far past the SLA; on a CPU the
# server, its model and the load generator share the cores
RATES = {"cuda": [100, 200, 400, 600, 800, 1200, 1600, 2400, 3200], "cpu": [100, 200, 400, 600, 800, 1000, 1200],
         "smoke": [50, 400]}  # smoke: under the ~800 req/s where one client process saturates on a small CPU
DURATION_S = {"cuda": 5.0, "cpu": 3.0, "smoke": 0.5}
ROUNDS = {"cuda": 3, "cpu": 3, "smoke": 1}
