"""The serving recipe on 127.0.0.1: a real server (FastAPI on uvicorn) per twin under open-loop load.

The server holds: malformed requests get a 422 with a one-line reason and it serves on; a full queue
answers 503 with Retry-After at once; Ctrl-C answers what is in flight before the process ends. The
recipe's smoke run writes its report with both curves, each twin's SLA rate, parity and the traces;
a fast twin that hands answers to the wrong customers fails parity."""
import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from common.analysis.load import RatePoint, sla_rate
from common.runners.load import check_local

from conftest import REPO, run_module

ROW = [0.0] * 38
# the serving runner in a fresh interpreter, not forked from the suite's zygote (conftest.run_module): forked,
# it lost its exit status in 3 of 5 runs on this VM after its servers and its load clients (which it forks with
# multiprocessing) had ended; the cause is not found
FRESH = True


def _start(tmp_path, *flags, env=None):
    from common.runners.serve import free_port

    port = free_port()
    summary = tmp_path / "summary.json"
    proc = subprocess.Popen([sys.executable, str(REPO / "recipes" / "serving" / "churn_slow.py"), "--port", str(port),
                             "--device", "cpu", "--data", "synthetic", "--summary", str(summary), *flags], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    import httpx

    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        try:
            if httpx.post(url + "/predict", json={"features": ROW}, timeout=2).status_code == 200:
                return proc, url, summary
        except httpx.HTTPError:
            time.sleep(0.05)
    proc.kill()
    raise AssertionError("the server never answered")


async def _concurrently(url, n, timeout=30):
    import httpx

    async with httpx.AsyncClient(timeout=timeout) as client:
        async def one():
            try:
                return await client.post(url + "/predict", json={"features": ROW})
            except httpx.HTTPError as e:
                return e
        return await asyncio.gather(*(one() for _ in range(n)))


def test_the_server_refuses_bad_requests_sheds_overload_and_drains_on_ctrl_c(tmp_path):
    """One slow twin whose forwards are planted to take 0.3 s, with room for 2 waiting requests."""
    import httpx

    proc, url, summary = _start(tmp_path, "--queue-limit", "2", env={"COOKBOOK_FAULT": "delay:slow:0.3"})
    try:
        for body, reason in ((b"{oops", "the body is not JSON"),
                             (json.dumps({"features": [1.0, 2.0]}).encode(), "customer 0: expected 38 features, got 2"),
                             (b'{"features": [NaN' + b", 0" * 37 + b"]}", "customer 0, feature 0: nan is not finite"),
                             (json.dumps({"features": ["a"] + ROW[1:]}).encode(), "'a' is not a number")):
            r = httpx.post(url + "/predict", content=body, timeout=5)
            assert r.status_code == 422 and reason in r.json()["error"] and "\n" not in r.json()["error"], r.text
        digits = lambda n: b'{"features": [1' + b"0" * (n - 1) + b", 0" * 37 + b"]}"  # noqa: E731
        for body, reason in ((b"[" * 100_000, "nests deeper"), (digits(401), "an integer of 401 digits is not finite"),
                             (digits(5000), "a number too long to read"),
                             (b'{"features": []}', '"features" must be a non-empty list'),
                             (b'{"features": 5}', '"features" must be a non-empty list')):
            r = httpx.post(url + "/predict", content=body, timeout=5)  # each a 500 before, and not counted
            assert r.status_code == 422 and reason in r.json()["error"] and "\n" not in r.json()["error"], r.text
        t0 = time.perf_counter()
        r = httpx.post(url + "/predict", content=b" " * (3 << 20), timeout=30)  # refused unread, not parsed
        assert r.status_code == 413 and "over 2097152 bytes" in r.json()["error"] and time.perf_counter() - t0 < 5
        assert httpx.post(url + "/predict", json={"features": [ROW, ROW]}, timeout=5).json()["churn_probability"]
        # overload: 1 forward running + 2 waiting; the rest are shed at once with Retry-After
        t0 = time.perf_counter()
        answers = asyncio.run(_concurrently(url, 10))
        codes = sorted(getattr(r, "status_code", None) for r in answers)
        shed = [r for r in answers if getattr(r, "status_code", None) == 503]
        assert codes.count(200) >= 2 and len(shed) >= 5, codes
        assert all(r.headers["retry-after"] == "1" and "overloaded" in r.json()["error"] for r in shed)
        assert time.perf_counter() - t0 < 5  # bounded: the shed requests did not wait their turn
        stats = httpx.get(url + "/admin/stats", timeout=5).json()
        assert stats["counts"]["422"] == 9 and stats["counts"]["413"] == 1 and stats["counts"]["503"] == len(shed)
        assert "500" not in stats["counts"]
        assert stats["reasons_422"] == {"not JSON": 2, "wrong feature count": 1, "not finite": 2, "not a number": 2,
                                        "no features": 2}

        # the drain: requests in flight when Ctrl-C comes are still answered
        async def interrupted():  # two: both fit the queue, however late the model thread takes the first
            task = asyncio.ensure_future(_concurrently(url, 2))
            await asyncio.sleep(0.15)
            proc.send_signal(signal.SIGINT)
            return await task
        answers = asyncio.run(interrupted())
        assert [getattr(r, "status_code", None) for r in answers] == [200, 200]
        assert proc.wait(timeout=60) == 0
        said = proc.stdout.read()
        assert f"serving the slow twin on {url}/predict" in said and "drained: 2 request(s) in flight" in said
        done = json.loads(summary.read_text())
        assert done["in_flight_at_signal"] == 2 and done["answered_after_signal"] == 2
    finally:
        proc.kill()


def test_the_sla_rate_is_where_p99_crosses_the_sla_between_swept_rates():
    def point(rate, p99, failed=0):
        return RatePoint(rate=rate, sent=100, ok=100 - failed, rejected_503=failed, errors=0, timeouts=0, p99_ms=p99)
    assert sla_rate([point(100, 10), point(400, 90)], 50) == (200.0, False)  # halfway in p99, halfway in log rate
    assert sla_rate([point(100, 10), point(200, 20, failed=3)], 50) == (100, False)  # failures alone: the last met
    assert sla_rate([point(100, 60)], 50) == (0.0, False)
    assert sla_rate([point(100, 10), point(200, 20)], 50) == (200, True)  # never crossed: a floor
    with pytest.raises(ValueError, match="only sent to this machine"):
        check_local("http://example.com:80/predict")


@pytest.mark.xdist_group("serving-runner")  # one worker: the second run loads the first one's AOT package
def test_make_recipe_serving_smoke_writes_both_curves_parity_and_traces(tmp_path):
    proc = run_module("common.runners.compare", "serving", "--smoke", "--device", "cpu", "--data", "synthetic",
                      "--reports-dir", str(tmp_path), timeout=600, fresh=FRESH)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    md = (tmp_path / "serving.md").read_text()
    assert "**CPU run: not a GPU result**" in md and "SLA rate (the offered load at which p99 crosses 50 ms" in md
    assert "- Parity of the churn probability per request (passed): 128 customers" in md
    assert md.count("each refused with a 422 and a one-line reason") == 2 and "exit codes 0" in md
    assert "| 50 |" in md and "![p99 against offered load](serving_churn.png)" in md
    assert (tmp_path / "serving_churn.png").stat().st_size > 5000
    for variant in ("slow", "fast"):
        trace = tmp_path / "traces" / "serving" / f"churn_{variant}.pt.trace.json"
        names = {e.get("name") for e in json.loads(trace.read_text())["traceEvents"]}
        assert {"forward", "batching wait"} <= names  # the model thread's own ranges, under load
        assert f"[its page](traces/serving/churn_{variant}.html)" in md
        assert (trace.parent / f"churn_{variant}.html").is_file()
    from common.analysis import figures

    facts = figures.facts_of(md)
    assert facts["recipe"] == "serving" and facts["device_type"] == "cpu" and facts["smoke"]


@pytest.mark.xdist_group("serving-runner")
def test_a_fast_twin_that_answers_the_wrong_customer_fails_parity(tmp_path):
    proc = run_module("common.runners.compare", "serving", "--smoke", "--device", "cpu", "--data", "synthetic",
                      "--rates", "50", "--duration-s", "0.5", "--reports-dir", str(tmp_path), timeout=600,
                      env={"COOKBOOK_FAULT": "shuffled:fast"}, fresh=FRESH)
    assert proc.returncode == 1 and "parity FAILED for serving/churn" in proc.stderr, proc.stdout + proc.stderr
    assert "**Parity FAILED**: the fast twin's answer to request" in (tmp_path / "serving.md").read_text()


def test_a_rate_the_client_could_not_offer_is_never_counted():
    def point(rate, p99, offered=None, lag=1.0, saturated=False):
        return RatePoint(rate=rate, sent=100, ok=100, rejected_503=0, errors=0, timeouts=0, p99_ms=p99,
                         offered_per_s=offered or rate, send_lag_p99_ms=lag, client_saturated=saturated)
    assert point(100, 10, offered=85).client_fell_short(50)  # sent below 90% of the offered rate
    assert point(100, 10, lag=13).client_fell_short(50) and not point(100, 10, lag=12).client_fell_short(50)
    # a miss beyond a rate the client could not offer is the client's: the server held at least the last rate met
    assert sla_rate([point(100, 10), point(400, 90, saturated=True)], 50) == (100, True)
    assert sla_rate([point(100, 90, saturated=True)], 50) == (0.0, True)


@pytest.mark.xdist_group("serving-runner")
def test_a_saturated_load_generator_offers_again_from_more_processes_and_marks_what_it_could_not(tmp_path):
    """A planted client that blocks 20 ms per request sends 50 requests/s at most from one process: 80/s is
    offered again from two, and 600/s, beyond 8 (the most on any machine), is marked and not counted. The
    SLA (200 ms) leaves room for the planted client's own 20 ms lag, which the latencies carry."""
    proc = run_module("common.runners.compare", "serving", "--smoke", "--device", "cpu", "--data", "synthetic",
                      "--rates", "20,80,600", "--duration-s", "0.5", "--rounds", "1", "--sla-ms", "200",
                      "--reports-dir", str(tmp_path), timeout=600, env={"COOKBOOK_FAULT": "slow-client:20"},
                      fresh=FRESH)
    out = proc.stdout
    assert "80 req/s: 1 client process(es) sent" in out and "again from 2" in out, out + proc.stderr
    # 600/s is beyond any machine's clients; on a busy one even two may fall short of 80/s, where it stops
    assert out.count("the load generator could not offer ") == 2  # each twin's sweep ends there, uncounted
    md = (tmp_path / "serving.md").read_text()
    assert md.count("(the load generator could not offer ") == 2 and "not counted: the client sent" in md
    assert "It could not offer " in md and "req/s: those rows are the client's" in md
