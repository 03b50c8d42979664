"""What a load test's rate measured: one offered rate's outcome (common/runners/load.py sends it), whether
the server or the client set it, and the rate at which a server stops meeting its SLA."""
from dataclasses import dataclass, field

CLIENT_SHORT = 0.9  # a client that sent below 90% of the offered rate could not offer it
CLIENT_LAG_SHARE = 0.25  # nor one whose own send lag (p99) took a quarter of the SLA, which latency includes


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
    offered_per_s: float = 0.0  # the rate the client really sent at (sent over its sending span)
    clients: int = 1  # client processes that shared the schedule
    client_saturated: bool = False  # the client could not offer this rate: its figures are not the server's

    def failures(self) -> int:
        return self.rejected_503 + self.errors + self.timeouts

    def meets(self, sla_ms: float) -> bool:
        """Every request answered, and the answered ones' p99 within the SLA."""
        return self.failures() == 0 and self.ok > 0 and self.p99_ms is not None and self.p99_ms <= sla_ms

    def client_fell_short(self, sla_ms: float) -> bool:
        """Whether the client, not the server, set these figures: it sent slower than offered, or its own
        lag took a share of the SLA that the latencies then carry."""
        return (self.offered_per_s < CLIENT_SHORT * self.rate
                or (self.send_lag_p99_ms or 0.0) > CLIENT_LAG_SHARE * sla_ms)


def sla_rate(points: list[RatePoint], sla_ms: float) -> tuple[float, bool]:
    """(the offered rate at which the server stops meeting the SLA, whether the sweep stopped short of
    it). Between the last rate met and the first missed, p99 is taken as linear in log rate, so that
    the figure is not stuck to the swept grid; a rate missed by failures alone (503s, timeouts) ends
    it at the last rate met. 0.0 where the lowest rate missed already; the highest rate, censored,
    where every rate was met; the last rate met, censored, where the client could not offer the next
    (0.0, censored: not even the lowest), whose figures are the client's, not the server's."""
    last = None
    for p in points:
        if p.client_saturated:
            return (last.rate, True) if last else (0.0, True)
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
