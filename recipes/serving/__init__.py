"""Serving: the churn model behind an HTTP endpoint under open-loop load, one forward per request
against micro-batches of an ahead-of-time compiled model (common/runners/serve.py runs it)."""

from common.spec import AnswerParity, RecipeSpec, Serving

RECIPE = RecipeSpec(
    title="Serving under load",
    # each customer's answer, in order, against the slow twin's (both fp32; AOTInductor's fused kernels
    # round a little differently): a wrong customer's answer is 0.1-0.9 off on the trained weights
    parity=AnswerParity(what="churn probability per request", atol=0.0001),
    serving=Serving(
        parity_requests={"cuda": 1024, "cpu": 512, "smoke": 128},
        sla_ms=50.0,  # p99 latency; `--sla-ms` sets another
        # offered rates (requests/s) swept per twin, upwards until it falls far past the SLA; on a CPU the
        # server, its model and the load generator share the cores
        rates={
            "cuda": [100, 200, 400, 600, 800, 1200, 1600, 2400, 3200],
            "cpu": [100, 200, 400, 600, 800, 1000, 1200],
            "smoke": [50, 400],
        },  # smoke: under the ~800 req/s where one client process saturates on a small CPU
        duration_s={"cuda": 5.0, "cpu": 3.0, "smoke": 0.5},
        rounds={"cuda": 3, "cpu": 3, "smoke": 1},
    ),
)
