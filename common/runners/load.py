"""Open-loop load on a server at 127.0.0.1: requests sent at a fixed arrival rate, whatever the server does.

A closed loop (each client waits for its answer before sending the next) slows down with the server
it measures, so a slow server is offered less load and its queueing never shows: coordinated
omission. Here request i is due at start + i / rate, and its latency runs from that moment, so a
request the client itself sent late (a busy event loop) is counted late too; how late the client
sent is reported apart (`send_lag_p99_ms`), so that a saturated client is not mistaken for a slow
server. Bounded in count and time: at most rate x duration requests, each with its own timeout.
Built on httpx (its AsyncClient), one connection per request in flight.
"""
import asyncio
import json
import time
from dataclasses import dataclass, field

from common.analysis import stats

LOCAL = ("127.0.0.1", "localhost")


@dataclass
class RatePoint:
    """One offered rate's outcome."""
    rate: float  # offered requests per second
    sent: int
    ok: int
    rejected_503: int
    errors: int  # any other status, or a connection that failed
    timeouts: int
    p50_ms: float | None = None  # of the answered (200) requests, from their due time
    p95_ms: float | None = None
    p99_ms: float | None = None
    achieved_per_s: float = 0.0  # answered requests per second of the run
    send_lag_p99_ms: float | None = None  # how late the client sent, p99: the client's own saturation
    server: dict = field(default_factory=dict)  # the server's view of the same window (/admin/stats)

    def failures(self) -> int:
        return self.rejected_503 + self.errors + self.timeouts

    def meets(self, sla_ms: float) -> bool:
        """Every request answered, and the answered ones' p99 within the SLA."""
        return self.failures() == 0 and self.ok > 0 and self.p99_ms is not None and self.p99_ms <= sla_ms


def check_local(url: str) -> None:
    import urllib.parse

    host = urllib.parse.urlparse(url).hostname
    if host not in LOCAL:
        raise ValueError(f"load is only sent to this machine (127.0.0.1), not {host}")


async def offer(url: str, bodies: list[bytes], rate: float, duration_s: float, timeout_s: float) -> RatePoint:
    """Send rate x duration_s requests (bodies taken in turn) to url at a fixed arrival rate."""
    import httpx

    check_local(url)
    n = max(1, int(rate * duration_s))
    latencies, lags, outcome = [], [], {"ok": 0, "503": 0, "err": 0, "timeout": 0}
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=1000)
    async with httpx.AsyncClient(limits=limits, timeout=timeout_s, headers={"content-type": "application/json"}) \
            as client:
        start = time.perf_counter() + 0.05

        async def one(i: int):
            due = start + i / rate
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            lags.append((time.perf_counter() - due) * 1e3)
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

        await asyncio.gather(*(one(i) for i in range(n)))
        elapsed = time.perf_counter() - start
    pct = {q: stats.percentile(latencies, q) if latencies else None for q in (50, 95, 99)}
    return RatePoint(rate=rate, sent=n, ok=outcome["ok"], rejected_503=outcome["503"], errors=outcome["err"],
                     timeouts=outcome["timeout"], p50_ms=pct[50], p95_ms=pct[95], p99_ms=pct[99],
                     achieved_per_s=outcome["ok"] / elapsed if elapsed > 0 else 0.0,
                     send_lag_p99_ms=stats.percentile(lags, 99) if lags else None)


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
                return r.json()["churn_probability"] if r.status_code == 200 else None
        return list(await asyncio.gather(*(one(r) for r in rows)))


def run(coro):
    return asyncio.run(coro)


def sla_rate(points: list[RatePoint], sla_ms: float) -> tuple[float, bool]:
    """(the offered rate at which the server stops meeting the SLA, whether the sweep stopped short of
    it). Between the last rate met and the first missed, p99 is taken as linear in log rate, so that
    the figure is not stuck to the swept grid; a rate missed by failures alone (503s, timeouts) ends
    it at the last rate met. 0.0 where the lowest rate missed already; the highest rate, censored,
    where every rate was met."""
    last = None
    for p in points:
        if p.meets(sla_ms):
            last = p
            continue
        if last is None:
            return 0.0, False
        if p.p99_ms is None or p.p99_ms <= sla_ms or p.p99_ms <= last.p99_ms:
            return last.rate, False
        t = (sla_ms - last.p99_ms) / (p.p99_ms - last.p99_ms)
        return last.rate * (p.rate / last.rate) ** t, False
    return (last.rate, True) if last else (0.0, False)
