"""Run a served recipe (recipes/serving): each twin as a real server on 127.0.0.1 under open-loop load.

    python -m common.runners.serve serving [--smoke] [--rounds N] [--sla-ms 50] [--rates 50,100,200]

`make recipe-serving` comes here through common.runners.compare. Per round, slow and fast in turn
(who goes first alternates): the twin's server is started as its own process, and the runner
measures its cold start (process start to the first answer), asks it for the parity requests'
answers (each customer its own request, many in flight), offers it each rate of the sweep for a
fixed time (common/runners/load.py: open loop, so no coordinated omission) until it falls far past the SLA,
records a profiled window of its model thread in round 1, then presses Ctrl-C while requests are in
flight and checks that they are answered (the drain). The figure per process is the highest offered
rate whose p99 stays within the SLA with every request answered; slow and fast are compared over
processes (the interval of every recipe), and their answers request by request.
"""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from common import catalog, env
from common.analysis import aggregate, stats, traces
from common.analysis.load import sla_rate
from common.errors import CookbookError, exit_with
from common.files import atomic_write_text
from common.render import trace_page
from common.runners import launch
from common.runners.load import answers, offer, run
from common.workload_specs import resolve, workload_spec

START_TIMEOUT_S = 300  # the first start builds the trained weights and, for the fast twin, its AOT package
DRAIN_TIMEOUT_S = 60
SATURATED_P99 = 4.0  # a rate whose p99 passes 4x the SLA ends the twin's sweep: higher rates only queue
SATURATED_FAILURES = 0.1  # as does one where a tenth of the requests fail (503s, timeouts, errors)
MAX_CLIENTS = 8  # client processes a rate may be offered from, where one cannot offer it (at most its cores)


@dataclass
class TwinRun:
    """One process of one twin: its curve, its answers and its robustness, as the runner saw them."""
    pair: str
    variant: str
    round: int
    cold_start_s: float
    setup_s: float
    points: list  # RatePoint as dicts, ascending rate
    sla_rate: float  # the rate at which p99 crosses the SLA (load.sla_rate; 0: not even the lowest rate)
    sla_censored: bool  # every swept rate met the SLA, or the client could not offer more: a floor
    saturated_at: float | None
    answers: list  # parity: each customer's answer, in order
    rejected_422: dict  # the malformed requests sent, each kind -> whether it got a 422 with a reason
    drain: dict  # in flight at Ctrl-C, answered after it, exit code
    profile: dict | None  # round 1: the profiled window (rate, the server's breakdown, trace path)
    stamp: dict
    data_source: dict
    returncode: int = 0
    log: str = ""
    sla_ms: float = 0.0
    client_limit: float | None = None  # the rate the load generator could not offer (none counted from there)


@dataclass
class ServePlan:
    recipe: str
    pairs: list
    rounds: int
    rates: list
    duration_s: float
    sla_ms: float
    parity_requests: int
    device: str
    data: list
    smoke: bool
    reports_dir: Path
    results_dir: Path
    command: str
    mode: str = field(default="cpu")
    # with 4 cores or more the server and its load generator run on cores of their own, half each
    server_cpus: list | None = None
    client_cpus: list | None = None

    @property
    def most_clients(self) -> int:
        return max(2, min(MAX_CLIENTS, len(self.client_cpus or [])))

    @property
    def timeout_s(self) -> float:
        """A request's own timeout: ten times the SLA, at least a second (a timeout is a failure)."""
        return max(1.0, 10 * self.sla_ms / 1000)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse(argv) -> ServePlan:
    p = argparse.ArgumentParser(prog="python -m common.runners.serve", description=__doc__.splitlines()[0])
    p.add_argument("recipe")
    launch.add_flags(p, rounds_help="rounds of slow and fast processes (default: the recipe's ROUNDS)")
    p.add_argument("--sla-ms", type=float, help="the latency SLA on p99, ms (default: the recipe's SLA_MS)")
    p.add_argument("--rates", help="offered rates, requests/s, comma-separated (default: the recipe's RATES)")
    p.add_argument("--duration-s", type=float, help="seconds of load per rate (default: the recipe's DURATION_S)")
    p.add_argument("--workloads", help="(accepted for the recipe runner's flags; the served recipe has one pair)")
    a = p.parse_args(argv)
    catalog.check(a.recipe)
    load = catalog.spec(a.recipe).serving
    cuda = launch.use_cuda(a.device)
    mode = "smoke" if a.smoke else "cuda" if cuda else "cpu"
    try:
        rates = sorted(float(r) for r in a.rates.split(",")) if a.rates else load.rates[mode]
    except ValueError:
        raise CookbookError(f"--rates {a.rates}: give requests per second, e.g. --rates 50,100,200") from None
    if not rates or min(rates) <= 0:
        raise CookbookError("--rates: every rate must be above 0")
    sla = a.sla_ms if a.sla_ms is not None else load.sla_ms
    if sla <= 0:
        raise CookbookError("--sla-ms must be above 0")
    results = launch.output_folder(a.reports_dir, a.recipe)
    cpus = launch.cpu_set(a.cpus)
    half = len(cpus) // 2 if len(cpus) >= 4 else 0
    return ServePlan(recipe=a.recipe, pairs=catalog.workloads(a.recipe), rounds=a.rounds or load.rounds[mode],
                rates=rates, duration_s=a.duration_s or load.duration_s[mode], sla_ms=sla,
                parity_requests=load.parity_requests[mode], device="cuda" if cuda else "cpu", data=a.data,
                smoke=a.smoke, reports_dir=Path(a.reports_dir), results_dir=results, mode=mode,
                command="python -m common.runners.serve " + " ".join(argv),
                server_cpus=cpus[:half] or None, client_cpus=cpus[half:] if half else None)


def _post(url: str, body: bytes, timeout: float = 2.0) -> tuple[int, dict, dict]:
    import httpx

    r = httpx.post(url, content=body, timeout=timeout)
    try:
        doc = r.json()
    except ValueError:
        doc = {}
    return r.status_code, doc, dict(r.headers)


def _get(url: str) -> dict:
    import httpx

    return httpx.get(url, timeout=10).json()


class Twin:
    """One server process of one twin."""

    def __init__(self, plan: ServePlan, pair: str, variant: str, round_no: int, trace: Path | None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.summary = plan.results_dir / f"{pair}_{variant}_r{round_no}.summary.json"
        self.log_path = plan.results_dir / f"{pair}_{variant}_r{round_no}.log"
        argv = ["--port", str(self.port), "--device", plan.device, "--summary", str(self.summary), "--variant", variant]
        argv += launch.data_flags(plan.data, [catalog.workload_of(pair)])[catalog.workload_of(pair)]
        if trace is not None:
            argv += ["--trace", str(trace)]
        self.log = open(self.log_path, "w")
        self.started = time.perf_counter()
        self.proc = launch.process(["-m", catalog.module(plan.recipe, pair, variant)], argv, self.log,
                                   {env.RUN_ENV: f"{variant}:{round_no}"}, cpus=plan.server_cpus)

    def wait_ready(self, body: bytes) -> float:
        """Seconds from the process's start to its first answer."""
        import httpx

        while time.perf_counter() - self.started < START_TIMEOUT_S:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode} before answering")
            try:
                r = httpx.post(self.url + "/predict", content=body, timeout=2)
            except httpx.HTTPError:
                time.sleep(0.02)
                continue
            if r.status_code == 200:
                return time.perf_counter() - self.started
            raise RuntimeError(f"its first answer was a {r.status_code}: {r.text[:300]}")
            time.sleep(0.02)
        raise RuntimeError(f"no answer within {START_TIMEOUT_S} s")

    def tail(self, lines: int = 15) -> str:
        self.log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> int:
        rc = launch.end_process(self.proc)
        self.log.close()
        return rc


MALFORMED = {  # kind -> a body the server must refuse with a 422 and a one-line reason
    "not JSON": b"{not json",
    "wrong feature count": json.dumps({"features": [0.0, 1.0]}).encode(),
    "not finite": b'{"features": [NaN' + b", 0.0" * 37 + b"]}",
}


def run_twin(plan: ServePlan, pair: str, variant: str, round_no: int, rows: list[list[float]]) -> TwinRun:
    """Start the twin's server, measure it, drain it; the outcome, whatever happened."""
    trace = (plan.reports_dir / "traces" / plan.recipe / f"{pair}_{variant}.pt.trace.json") if round_no == 1 else None
    twin = Twin(plan, pair, variant, round_no, trace)
    bodies = [json.dumps({"features": r}).encode() for r in rows]
    try:
        cold = twin.wait_ready(bodies[0])
        got = run(answers(twin.url + "/predict", rows[:plan.parity_requests]))
        refused = {}
        for kind, body in MALFORMED.items():
            code, doc, _ = _post(twin.url + "/predict", body)
            refused[kind] = code == 422 and "\n" not in doc.get("error", "\n")
        refused["still serving"] = _post(twin.url + "/predict", bodies[0])[0] == 200
        points, saturated, client_limit, clients = [], None, None, 1
        for rate in plan.rates:
            point = _offered(plan, twin, bodies, rate, clients, f"{pair} {variant} r{round_no}")
            clients = point.clients
            points.append(point)
            print(f"  {pair} {variant} r{round_no}: {rate:g} req/s -> p99 {_ms(point.p99_ms)}, "
                  f"{point.ok}/{point.sent} answered, {point.rejected_503} x 503, {point.timeouts} timeouts"
                  + (f", sent at {point.offered_per_s:.0f}/s from {clients} client process(es)" if clients > 1 or
                     point.client_saturated else ""), flush=True)
            if point.client_saturated:  # the client's limit, not the server's: no higher rate is counted
                client_limit = rate
                print(f"  {pair} {variant} r{round_no}: the load generator could not offer {rate:g} req/s "
                      f"({clients} client process(es) sent {point.offered_per_s:.0f}/s, lag p99 "
                      f"{_ms(point.send_lag_p99_ms)}): not counted", flush=True)
                break
            if (point.p99_ms or 0) > SATURATED_P99 * plan.sla_ms or point.failures() > SATURATED_FAILURES * point.sent:
                saturated = rate
                break
        crossing, censored = sla_rate(points, plan.sla_ms)
        met = [p.rate for p in points if p.meets(plan.sla_ms) and not p.client_saturated]
        profile = (_profile(plan, twin, bodies, max(met, default=plan.rates[0]), trace, clients)
                   if trace is not None else None)
        about = _get(twin.url + "/admin/stats")
        drain = _drain(twin, bodies)
        rc = drain["exit_code"]
        return TwinRun(pair=pair, variant=variant, round=round_no, cold_start_s=cold, setup_s=about.get("setup_s", 0),
                       points=[asdict(p) for p in points], sla_rate=crossing, sla_censored=censored,
                       saturated_at=saturated, client_limit=client_limit,
                       answers=got, rejected_422=refused, drain=drain, profile=profile, stamp=about.get("stamp", {}),
                       data_source=about.get("data_source", {}), returncode=rc, sla_ms=plan.sla_ms)
    except Exception as e:
        rc = twin.stop()
        raise CookbookError(f"{pair} {variant} round {round_no}: {e} (exit {rc}); its log, {twin.log_path}:\n"
                            f"{twin.tail()}") from None
    finally:
        twin.stop()


def _ms(v):
    return "-" if v is None else f"{v:.1f} ms"


def _offered(plan, twin, bodies, rate: float, clients: int, who: str):
    """One rate's point, offered again from twice the client processes (up to plan.most_clients) while the
    client, not the server, fell short of it; marked client_saturated where even those did."""
    while True:
        _post(twin.url + "/admin/reset", b"")
        point = offer(twin.url + "/predict", bodies, rate, plan.duration_s, plan.timeout_s, clients, plan.client_cpus)
        point.server = _get(twin.url + "/admin/stats")["window"]
        point.client_saturated = point.client_fell_short(plan.sla_ms)
        if not point.client_saturated or clients >= plan.most_clients:
            return point
        print(f"  {who}: {rate:g} req/s: {clients} client process(es) sent {point.offered_per_s:.0f}/s (lag p99 "
              f"{_ms(point.send_lag_p99_ms)}); again from {min(plan.most_clients, 2 * clients)}", flush=True)
        clients = min(plan.most_clients, 2 * clients)


def _profile(plan, twin, bodies, rate, trace, clients: int = 1) -> dict:
    """A profiled window of the model thread under load at the highest swept rate within the SLA
    (else the lowest): where a request's time went, and the trace."""
    _post(twin.url + "/admin/reset", b"")
    _post(twin.url + f"/admin/profile?batches={20 if plan.smoke else 200}", b"")
    point = offer(twin.url + "/predict", bodies, rate, plan.duration_s, plan.timeout_s, clients, plan.client_cpus)
    deadline = time.perf_counter() + 30
    while _get(twin.url + "/admin/stats")["profile"] != "written" and time.perf_counter() < deadline:
        time.sleep(0.1)
    window = _get(twin.url + "/admin/stats")["window"]
    written = trace.is_file()
    page = trace_page.beside(trace) if written else None
    return {"rate": rate, "server": window, "p99_ms": point.p99_ms,
            "trace": str(trace.relative_to(plan.reports_dir)) if written else None,
            "page": str(Path(page).relative_to(plan.reports_dir)) if page else None,
            "figures": trace_figures(trace) if written else None}


SYNCS = ("aten::_local_scalar_dense", "cudaStreamSynchronize", "cudaDeviceSynchronize")  # .item(), .cpu()'s wait


def trace_figures(trace: Path) -> dict:
    """Per forward of the profiled window: the model thread's host time in it, the device's time (GPU
    kernels, copies and sets), and the host syncs (`.item()` and the like; a stream or device sync)."""
    events = [e for e in traces.read_trace(trace).get("traceEvents", []) if e.get("ph") == "X"]
    # the model thread's own ranges: on a GPU the profiler adds a copy of each on the GPU's track
    forwards = [e for e in events if e.get("name") == "forward" and e.get("cat") == "user_annotation"]
    n = max(len(forwards), 1)
    return {"forwards": len(forwards), "host_ms": sum(e.get("dur", 0) for e in forwards) / n / 1e3,
            "device_ms": sum(e.get("dur", 0) for e in events if e.get("cat") in traces.GPU_CATS) / n / 1e3,
            "syncs": sum(e.get("name") in SYNCS for e in events) / n}


def _drain(twin: Twin, bodies: list[bytes]) -> dict:
    """Ctrl-C while requests are in flight: each must still be answered, and the server end cleanly."""
    import asyncio

    import httpx

    async def burst():
        async with httpx.AsyncClient(timeout=DRAIN_TIMEOUT_S) as client:
            async def one(b):
                try:
                    return (await client.post(twin.url + "/predict", content=b)).status_code
                except httpx.HTTPError:
                    return None
            tasks = [asyncio.create_task(one(b)) for b in bodies[:32]]
            await asyncio.sleep(0.01)  # the requests are on their way
            os.kill(twin.proc.pid, signal.SIGINT)
            return await asyncio.gather(*tasks)

    codes = run(burst())
    try:
        rc = twin.proc.wait(timeout=DRAIN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        rc = None
    summary = json.loads(twin.summary.read_text()) if twin.summary.is_file() else {}
    return {"sent": len(codes), "answered": sum(c == 200 for c in codes), "refused": sum(c is None for c in codes),
            "in_flight_at_signal": summary.get("in_flight_at_signal"),
            "answered_after_signal": summary.get("answered_after_signal"), "counts": summary.get("counts", {}),
            "exit_code": rc}


def serve_all(plan: ServePlan) -> dict:
    """Every pair's rounds; the results written as they come."""
    workload = catalog.workload_of(plan.pairs[0])  # a served recipe's pairs serve one workload
    data_arg = dict(zip(*[iter(launch.data_flags(plan.data, [workload])[workload])] * 2)).get("--data")
    rows = resolve(workload_spec(workload).requests)(data_arg)
    out = {}
    for pair in plan.pairs:
        for variant in ("slow", "fast"):  # what a twin builds ahead of time, outside every timing
            t0 = time.perf_counter()
            build = ["--port", "0", "--device", plan.device, "--prepare"] + (["--data", data_arg] if data_arg else [])
            prep = launch.process(["-m", catalog.module(plan.recipe, pair, variant)], build, None)
            try:
                said = prep.stdout.read()
                prep.wait()
            finally:  # Ctrl-C during the build: the build stops too
                prep.stdout.close()
                launch.end_process(prep)
            if prep.returncode:
                raise CookbookError(f"{pair} {variant}: preparing failed (exit {prep.returncode}):\n"
                                    + "\n".join(said.splitlines()[-15:]))
            out.setdefault(pair, {}).setdefault("prepare_s", {})[variant] = time.perf_counter() - t0
        runs = {"slow": [], "fast": []}
        for r in range(1, plan.rounds + 1):
            for variant in launch.alternating(["slow", "fast"], r):
                tr = run_twin(plan, pair, variant, r, rows)
                atomic_write_text(plan.results_dir / f"{pair}_{variant}_r{r}.json", json.dumps(asdict(tr), indent=1))
                runs[variant].append(tr)
        out[pair]["runs"] = runs
    return out


def judge(plan: ServePlan, pair: str, found: dict) -> dict:
    """Per pair: the SLA rates over processes and their interval, parity of the answers, robustness."""
    from types import SimpleNamespace

    slow, fast = found["runs"]["slow"], found["runs"]["fast"]
    rule = catalog.parity_rule(plan.recipe, pair)
    par = aggregate.answers_parity(SimpleNamespace(answers=[slow[0].answers]),
                                   SimpleNamespace(answers=[fast[0].answers]), rule)
    s_rates, f_rates = [t.sla_rate for t in slow], [t.sla_rate for t in fast]
    speedup = None
    measured = all(s_rates + f_rates) and not any(t.sla_censored for t in slow + fast)
    if measured:  # as times per request, so that "faster" means more requests within the SLA
        speedup = stats.speedup([1000.0 / x for x in s_rates], [1000.0 / x for x in f_rates])
    return {"parity": par, "speedup": speedup, "slow_rates": s_rates, "fast_rates": f_rates}


def serve_recipe(argv=None) -> int:
    plan = parse(sys.argv[1:] if argv is None else list(argv))
    launch.make_folder(plan.results_dir, plan.reports_dir)
    rates = ", ".join(f"{r:g}" for r in plan.rates)
    print(f"{plan.recipe}: {plan.rounds} round(s) of slow and fast servers, rates {rates} "
          f"req/s for {plan.duration_s:g} s each, SLA p99 <= {plan.sla_ms:g} ms ({plan.device})", flush=True)
    found = serve_all(plan)
    verdicts = {pair: judge(plan, pair, f) for pair, f in found.items()}
    from common.render import serving as render

    path = render.write(plan, found, verdicts)
    print(f"report: {path}")
    failed = [f"parity FAILED for {plan.recipe}/{pair}: {aggregate.parity_failure(v['parity'])}"
              for pair, v in verdicts.items() if not v["parity"].ok]
    for pair, f in found.items():
        for t in f["runs"]["slow"] + f["runs"]["fast"]:
            if t.returncode != 0 or t.drain["answered"] < t.drain["sent"] - t.drain["refused"]:
                failed.append(f"{pair} {t.variant} round {t.round}: the drain at Ctrl-C lost requests or the "
                              f"server did not end cleanly ({t.drain})")
            if not all(t.rejected_422.values()):
                failed.append(f"{pair} {t.variant} round {t.round}: malformed requests not refused as they should "
                              f"be ({t.rejected_422})")
    for line in failed:
        print(line, file=sys.stderr)
    return 1 if failed else 0


def main():
    try:
        sys.exit(serve_recipe())
    except CookbookError as e:
        exit_with(e, "common.runners.serve")
    except KeyboardInterrupt:
        print("\ninterrupted: the previous report is left as it was", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
