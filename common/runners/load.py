"""Open-loop load on a server at 127.0.0.1: requests sent at a fixed arrival rate, whatever the server does.

A closed loop (each client waits for its answer before sending the next) slows down with the server
it measures, so a slow server is offered less load and its queueing never shows: coordinated
omission. Here request i is due at start + i / rate, and its latency runs from that moment, so a
request the client itself sent late (a busy event loop) is counted late too; how late the client
sent is reported apart (`send_lag_p99_ms`), with the rate it really sent at (`offered_per_s`), so that
a saturated client is not mistaken for a slow server: where one client process cannot offer a rate,
the runner offers it again from several (`clients`: each sends every Nth request of the same
schedule, on the same monotonic clock), and a rate that even those could not offer is marked
(`client_saturated`) and never counted. Bounded in count and time: at most rate x duration
requests, each with its own timeout. Built on httpx (its AsyncClient), one connection per request
in flight. `COOKBOOK_FAULT=slow-client:MS` plants a client that blocks MS ms per request it sends
(the tests' stand-in for a saturated load generator).
"""
import asyncio
import json
import multiprocessing
import os
import time

from common import env
from common.analysis import stats
from common.analysis.load import RatePoint

LOCAL = ("127.0.0.1", "localhost")


def check_local(url: str) -> None:
    import urllib.parse

    host = urllib.parse.urlparse(url).hostname
    if host not in LOCAL:
        raise ValueError(f"load is only sent to this machine (127.0.0.1), not {host}")


def offer(url: str, bodies: list[bytes], rate: float, duration_s: float, timeout_s: float,
          clients: int = 1, cpus: list[int] | None = None) -> RatePoint:
    """Send rate x duration_s requests (bodies taken in turn) to url at a fixed arrival rate, from
    `clients` processes sharing one schedule (request i from process i mod clients), on `cpus` where
    given (cores apart from the server's)."""
    check_local(url)
    n = max(1, int(rate * duration_s))
    start = time.perf_counter() + (0.05 if clients == 1 else 0.5)  # the processes started before the first is due
    shares = [(url, bodies, rate, range(k, n, clients), start, timeout_s, cpus) for k in range(clients)]
    if clients == 1:  # in this process: pinned for the while, where it is pinned at all (cpus: Linux)
        before = os.sched_getaffinity(0) if cpus else None
        try:
            parts = [_share(shares[0])]
        finally:
            if before:
                os.sched_setaffinity(0, before)
    else:
        parts = _forked(shares, duration_s + timeout_s + 60)
    latencies = [x for p in parts for x in p["latencies"]]
    lags = [x for p in parts for x in p["lags"]]
    outcome = {k: sum(p["outcome"][k] for p in parts) for k in parts[0]["outcome"]}
    elapsed = max(p["ended"] for p in parts) - start
    last_sent = max(p["last_sent"] for p in parts)
    pct = {q: stats.percentile(latencies, q) if latencies else None for q in (50, 95, 99)}
    return RatePoint(rate=rate, sent=n, ok=outcome["ok"], rejected_503=outcome["503"], errors=outcome["err"],
                     timeouts=outcome["timeout"], p50_ms=pct[50], p95_ms=pct[95], p99_ms=pct[99],
                     achieved_per_s=outcome["ok"] / elapsed if elapsed > 0 else 0.0,
                     send_lag_p99_ms=stats.percentile(lags, 99) if lags else None,
                     # n sends over the span from the first due time to the last send (n / rate when on time)
                     offered_per_s=n / max(last_sent - start + 1.0 / rate, 1e-9), clients=clients)


def _forked(shares: list[tuple], within_s: float) -> list[dict]:
    """Each share from a process of its own, forked from this one (single-threaded here, no event loop
    running, no torch), its outcome sent back on a pipe; one that fails or does not end in time ends
    them all with an error, never a hang."""
    ctx = multiprocessing.get_context("fork")
    started = []
    for share in shares:
        recv, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_client, args=(share, send), daemon=True)
        proc.start()
        send.close()
        started.append((recv, proc))
    deadline, parts = time.monotonic() + within_s, []
    try:
        for recv, proc in started:
            if not recv.poll(max(0.0, deadline - time.monotonic())):
                raise RuntimeError(f"a load client (pid {proc.pid}) sent nothing within {within_s:.0f} s")
            try:
                part = recv.recv()
            except EOFError:
                raise RuntimeError(f"a load client (pid {proc.pid}) ended without its outcome "
                                   f"(exit {proc.exitcode})") from None
            if "error" in part:
                raise RuntimeError(f"a load client failed: {part['error']}")
            parts.append(part)
    finally:
        for recv, proc in started:
            if proc.is_alive():
                proc.kill()
            proc.join(5)
            recv.close()
    return parts


def _client(share: tuple, send) -> None:
    try:
        send.send(_share(share))
    except BaseException as e:  # said to the runner, which stops
        send.send({"error": f"{type(e).__name__}: {e}"})
    finally:
        send.close()


def _share(args) -> dict:
    *send, cpus = args
    if cpus:
        os.sched_setaffinity(0, cpus)
    return asyncio.run(_send(*send))


async def _send(url: str, bodies: list[bytes], rate: float, indices: range, start: float, timeout_s: float) -> dict:
    """One client's share of the schedule: request i due at start + i / rate (perf_counter: the system's
    monotonic clock, the same in every process)."""
    import httpx

    blocked = _planted_slowness()
    latencies, lags, outcome, last = [], [], {"ok": 0, "503": 0, "err": 0, "timeout": 0}, [start]
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=1000)
    async with httpx.AsyncClient(limits=limits, timeout=timeout_s, headers={"content-type": "application/json"}) \
            as client:
        async def one(i: int):
            due = start + i / rate
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            if blocked:
                time.sleep(blocked)  # the planted slow client: its event loop busy, as one saturated is
            sent = time.perf_counter()
            lags.append((sent - due) * 1e3)
            last[0] = max(last[0], sent)
            try:
                r = await client.post(url, content=bodies[i % len(bodies)])
            except httpx.TimeoutException:
                outcome["timeout"] += 1
                return
            except httpx.HTTPError:
                outcome["err"] += 1
                return
            if r.status_code == 200:
                outcome["ok"] += 1
                latencies.append((time.perf_counter() - due) * 1e3)
            elif r.status_code == 503:
                outcome["503"] += 1
            else:
                outcome["err"] += 1

        await asyncio.gather(*(one(i) for i in indices))
    return {"latencies": latencies, "lags": lags, "outcome": outcome, "last_sent": last[0],
            "ended": time.perf_counter()}


def _planted_slowness() -> float:
    """Seconds a planted slow client blocks per request sent (COOKBOOK_FAULT=slow-client:MS), else 0."""
    kind, _, ms = os.environ.get(env.FAULT_ENV, "").partition(":")
    return float(ms) / 1000 if kind == "slow-client" and ms.replace(".", "", 1).isdigit() else 0.0


async def answers(url: str, rows: list[list[float]], concurrency: int = 64) -> list[float | None]:
    """Each row sent as its own request, many in flight at once (so that a batching server batches
    them), the answers returned in the rows' order; None where a request failed."""
    import httpx

    check_local(url)
    gate = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=30.0) as client:
        async def one(row):
            async with gate:
                r = await client.post(url, content=json.dumps({"features": row}))
                return next(iter(r.json().values())) if r.status_code == 200 else None  # {answer: p}
        return list(await asyncio.gather(*(one(r) for r in rows)))


def run(coro):
    return asyncio.run(coro)
