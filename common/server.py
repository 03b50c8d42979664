"""The serving recipe's server: a twin's predict function behind an HTTP endpoint (FastAPI on uvicorn).

A twin script builds its model and hands `serve()` a predict function (a float tensor of customers'
rows in, one probability per row out, on the host) and how to batch. What every twin shares lives
here, so that the pair's diff is the model and the batching alone:

- POST /predict with {"features": [38 numbers]} (one customer) or {"features": [[...], ...]} (up to
  MAX_CUSTOMERS); the answer is {ANSWER: p} or a list of them, ANSWER the workload's spec's (for the
  churn workload "churn_probability"). A malformed body gets a 422 with a one-line reason, a body over
  MAX_BODY_BYTES a 413 unread, and the server goes on serving.
- One model thread runs every forward: requests wait in a bounded queue, and a request that finds
  it full gets a 503 with Retry-After at once, instead of unbounded latency. The thread takes up to
  `max_batch` rows per forward, waiting at most `max_wait_ms` for company after the first.
- Ctrl-C (SIGINT) or SIGTERM: uvicorn stops accepting connections and the requests in flight are
  answered before the process ends (the drain); the summary file counts them.
- /admin/stats (counts, where a request's time went since the last /admin/reset) and
  /admin/profile (a torch.profiler window over the model thread's next batches, its trace written
  to the run's trace folder) serve the runner (common/runners/serve.py). Bound to 127.0.0.1 only.
"""
import argparse
import asyncio
import importlib
import json
import math
import os
import queue
import signal
import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import torch

from common.analysis import stats
from common.measure import faults

MAX_CUSTOMERS = 1024  # rows one request may carry
MAX_BODY_BYTES = 2 << 20  # 1024 customers' rows fit in well under this; a larger body is refused unread (413)
RETRY_AFTER_S = 1
HOST = "127.0.0.1"  # the recipe's servers are for this machine's load generator only


class BadRequest(ValueError):
    """A request the server refuses with a 422: its kind (counted) and the one-line reason (answered)."""

    def __init__(self, kind: str, reason: str):
        super().__init__(reason)
        self.kind = kind


def parse(body: bytes, n_features: int) -> tuple[torch.Tensor, bool]:
    """The customers' rows of a request body, and whether it held one customer (not a list)."""
    try:
        doc = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BadRequest("not JSON", f"the body is not JSON ({e.msg if hasattr(e, 'msg') else e})") from None
    except RecursionError:  # [[[[... nested deeper than the parser goes
        raise BadRequest("not JSON", "the body nests deeper than any request of rows does") from None
    except ValueError as e:  # an integer of more digits than Python converts (sys.get_int_max_str_digits)
        raise BadRequest("not a number", f"the body holds a number too long to read ({str(e)[:80]})") from None
    if not isinstance(doc, dict) or "features" not in doc:
        raise BadRequest("no features", 'expected a JSON object with "features": a list of numbers, or a list of '
                                        'such lists')
    rows = doc["features"]
    if not isinstance(rows, list) or not rows:  # [] and 5 alike: neither is a customer's row
        raise BadRequest("no features", f'"features" must be a non-empty list of numbers (one customer) or of such '
                                        f'lists, not {json.dumps(rows)[:40]}')
    single = not any(isinstance(v, list) for v in rows)
    rows = [rows] if single else rows
    if len(rows) > MAX_CUSTOMERS:
        raise BadRequest("too many customers", f"{len(rows)} customers in one request; at most {MAX_CUSTOMERS}")
    for i, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != n_features:
            got = len(row) if isinstance(row, list) else type(row).__name__
            raise BadRequest("wrong feature count", f"customer {i}: expected {n_features} features, got {got}")
        for j, v in enumerate(row):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise BadRequest("not a number", f"customer {i}, feature {j}: {v!r} is not a number")
            try:
                finite = math.isfinite(v)
            except OverflowError:  # an integer beyond any float: 10**400
                finite = False
            if not finite:
                shown = str(v) if isinstance(v, float) else f"an integer of {len(str(abs(v)))} digits"
                raise BadRequest("not finite", f"customer {i}, feature {j}: {shown} is not finite")
    return torch.tensor(rows, dtype=torch.float32), single


@dataclass
class Pending:
    rows: torch.Tensor
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    arrived: float = field(default_factory=time.perf_counter)


@dataclass
class Window:
    """Where requests' time went since the last reset, in ms per request, and the batches' sizes."""
    queue_ms: list = field(default_factory=list)  # arrival -> taken by the model thread
    batching_ms: list = field(default_factory=list)  # taken -> its batch closed (waiting for company)
    forward_ms: list = field(default_factory=list)  # its batch's predict(), answers on the host
    batch_rows: list = field(default_factory=list)  # one per forward

    def summary(self) -> dict:
        def part(xs):
            return {"p50": stats.percentile(xs, 50), "p99": stats.percentile(xs, 99)} if xs else None
        return {"requests": len(self.queue_ms), "forwards": len(self.batch_rows),
                "rows_per_forward": sum(self.batch_rows) / len(self.batch_rows) if self.batch_rows else None,
                "queue_ms": part(self.queue_ms), "batching_ms": part(self.batching_ms),
                "forward_ms": part(self.forward_ms)}


class ModelThread(threading.Thread):
    """The one thread that runs forwards: torch work from one thread, never from the event loop."""

    def __init__(self, predict, max_batch: int, max_wait_ms: float, queue_limit: int, trace_path: Path | None,
                 wrong=None, delay_s: float = 0.0):
        super().__init__(name="model", daemon=True)
        self.delay_s = delay_s  # a planted slow forward (faults.forward_delay)
        self.predict, self.max_batch, self.max_wait_s = predict, max_batch, max_wait_ms / 1000.0
        self.queue = queue.Queue(maxsize=queue_limit)  # full: the endpoint answers 503
        self.window, self.trace_path, self.wrong = Window(), trace_path, wrong
        self.profile_batches, self.profile_state = 0, "none"
        self.stopping = threading.Event()

    def run(self):
        while not (self.stopping.is_set() and self.queue.empty()):
            try:
                first = self.queue.get(timeout=0.1)
            except queue.Empty:
                continue
            if self.profile_batches and self.trace_path is not None:
                self._profiled(first)
            else:
                self._batch(first)

    def _gather(self, first: Pending) -> list[Pending]:
        """The first request and whatever joins it within max_wait, up to max_batch rows."""
        batch, rows = [first], len(first.rows)
        deadline = time.perf_counter() + self.max_wait_s
        while rows < self.max_batch:
            left = deadline - time.perf_counter()
            try:
                nxt = self.queue.get(timeout=left) if left > 0 else self.queue.get_nowait()
            except queue.Empty:
                break
            batch.append(nxt)
            rows += len(nxt.rows)
        return batch

    def _batch(self, first: Pending):
        taken = time.perf_counter()
        with torch.profiler.record_function("batching wait"):
            batch = self._gather(first)
        closed = time.perf_counter()
        try:
            with torch.profiler.record_function("forward"):
                if self.delay_s:
                    time.sleep(self.delay_s)
                answers = self.predict(torch.cat([p.rows for p in batch]))
            if self.wrong is not None:  # a planted broken twin (faults.wrong_answers): answers misassigned
                answers = self.wrong(answers)
            parts = answers.split([len(p.rows) for p in batch])
        except Exception as e:  # a failed forward fails its requests, not the server; its log says why
            traceback.print_exc()
            for p in batch:
                p.loop.call_soon_threadsafe(_settle, p.future, None, e)
            return
        done = time.perf_counter()
        w = self.window
        w.batch_rows.append(sum(len(p.rows) for p in batch))
        for p, part in zip(batch, parts):
            w.queue_ms.append(max(0.0, taken - p.arrived) * 1e3)  # waiting while earlier batches ran
            w.batching_ms.append((closed - max(taken, p.arrived)) * 1e3)
            w.forward_ms.append((done - closed) * 1e3)
            p.loop.call_soon_threadsafe(_settle, p.future, part.tolist(), None)

    def _profiled(self, first: Pending):
        """The next `profile_batches` batches under torch.profiler, the trace written at the end."""
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.profile_state = "recording"
        with torch.profiler.profile(activities=activities) as prof:
            self._batch(first)
            for _ in range(self.profile_batches - 1):
                try:
                    self._batch(self.queue.get(timeout=1.0))
                except queue.Empty:
                    break
        self.profile_batches = 0
        self.trace_path.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(self.trace_path))
        self.profile_state = "written"


def _settle(future: asyncio.Future, result, error):
    if not future.done():
        future.set_exception(error) if error is not None else future.set_result(result)


async def _body(request) -> bytes | None:
    """The request's body, or None past MAX_BODY_BYTES (declared, or as it streams in), unread beyond it."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        return None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def app(predict, n_features: int, max_batch: int, max_wait_ms: float, queue_limit: int, trace_path: Path | None,
        wrong=None, delay_s: float = 0.0, about: dict | None = None, answer: str = "answer", title: str = "model"):
    """The FastAPI application around one model thread; `about` is returned by /admin/stats, and each
    answer under the key `answer` (the workload's: {"churn_probability": p})."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    worker = ModelThread(predict, max_batch, max_wait_ms, queue_limit, trace_path, wrong, delay_s)
    counts = Counter()  # served, 413, 422, 503, 500
    reasons = Counter()  # the 422s' reasons, by their first words
    state = {"in_flight": 0}

    api = FastAPI(title=title, docs_url=None, redoc_url=None)
    api.state.worker, api.state.counts, api.state.flight = worker, counts, state

    @api.post("/predict")
    async def predict_endpoint(request: Request):
        state["in_flight"] += 1
        try:
            body = await _body(request)
            if body is None:  # read no further than the limit: a huge body stalls nobody
                counts["413"] += 1
                return JSONResponse({"error": f"the body is over {MAX_BODY_BYTES} bytes, the most a request of "
                                              f"{MAX_CUSTOMERS} customers needs"}, status_code=413)
            try:
                rows, single = parse(body, n_features)
            except BadRequest as e:
                counts["422"] += 1
                reasons[e.kind] += 1
                return JSONResponse({"error": str(e)}, status_code=422)
            loop = asyncio.get_running_loop()
            pending = Pending(rows, loop.create_future(), loop)
            try:
                worker.queue.put_nowait(pending)
            except queue.Full:
                counts["503"] += 1
                return JSONResponse({"error": f"overloaded: {worker.queue.maxsize} requests already queued"},
                                    status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)})
            try:
                answers = await pending.future
            except Exception as e:
                counts["500"] += 1
                return JSONResponse({"error": f"the model failed: {type(e).__name__}: {e}"}, status_code=500)
            counts["200"] += 1
            return {answer: answers[0] if single else answers}
        finally:
            state["in_flight"] -= 1

    @api.get("/admin/stats")
    async def stats_endpoint():
        return {"counts": dict(counts), "reasons_422": dict(reasons), "window": worker.window.summary(),
                "profile": worker.profile_state, "queue_limit": worker.queue.maxsize, **(about or {})}

    @api.post("/admin/reset")
    async def reset_endpoint():
        worker.window = Window()
        return {"ok": True}

    @api.post("/admin/profile")
    async def profile_endpoint(batches: int = 20):
        if trace_path is None:
            return JSONResponse({"error": "no trace folder"}, status_code=409)
        worker.profile_state, worker.profile_batches = "armed", max(1, batches)
        return {"armed": batches, "trace": str(trace_path)}

    return api


def flags() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    p.add_argument("--data", default=None, help="Telco CSV path, or 'synthetic' (the runner's --data)")
    p.add_argument("--queue-limit", type=int, default=256, help="requests that may wait; more get a 503")
    p.add_argument("--summary", type=Path, help="write the run's counts here at exit (JSON)")
    p.add_argument("--trace", type=Path, help="where /admin/profile writes its trace")
    p.add_argument("--prepare", action="store_true", help="build what the twin builds ahead of time, then exit")
    p.add_argument("--variant", default=None, help="the run's role in its comparison (the runner sets it)")
    return p


@dataclass
class Context:
    """What a twin's load() gets: the device, the data's feature count and the trained weights."""
    device: torch.device
    n_features: int
    weights: dict
    prepare_only: bool
    cache_dir: Path
    workload: str = "served"  # names its compiled package in cache_dir


def serve(script_file: str, load, max_batch: int, max_wait_ms: float = 0.0):
    """Run a twin: load(ctx) -> predict, then uvicorn on 127.0.0.1 until SIGINT/SIGTERM; the drain and
    the counts are written to --summary."""
    import uvicorn

    from common import catalog, env
    from common.measure import stamp
    from common.workload_specs import workload_spec

    t_start = time.perf_counter()
    args = flags().parse_args()
    _, pair, workload, variant = catalog.identify(script_file)
    variant = args.variant or variant
    cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda" if cuda else "cpu")
    if device.type == "cpu":
        torch.set_num_threads(1)  # one model thread beside the event loop and the load generator
    n_features, weights, source = importlib.import_module(f"common.workloads.{workload}").served(args.data)
    ctx = Context(device, n_features, weights, args.prepare, env.data_dir() / "aoti", workload)
    predict = load(ctx)
    if args.prepare:
        return
    wrong = faults.wrong_answers(variant, pair, workload)
    about = {"variant": variant, "pair": pair, "max_batch": max_batch, "max_wait_ms": max_wait_ms,
             "data_source": source.to_json(), "stamp": stamp.take(device).to_json(),
             "setup_s": time.perf_counter() - t_start}
    api = app(predict, ctx.n_features, max_batch, max_wait_ms, args.queue_limit, args.trace, wrong,
              faults.forward_delay(variant, pair, workload), about, workload_spec(workload).answer, workload)
    worker = api.state.worker
    worker.start()
    drain = {}

    class Server(uvicorn.Server):
        async def startup(self, sockets=None):
            await super().startup(sockets)
            print(f"serving the {variant} twin on http://{HOST}:{args.port}/predict (Ctrl-C drains and stops)",
                  flush=True)

        def handle_exit(self, sig, frame):  # the drain starts: what is in flight now must still be answered
            drain.setdefault("in_flight_at_signal", api.state.flight["in_flight"])
            drain.setdefault("answered_before_signal", api.state.counts["200"])
            super().handle_exit(sig, frame)

    config = uvicorn.Config(api, host=HOST, port=args.port, log_level="warning", access_log=False,
                            timeout_graceful_shutdown=30, lifespan="off")
    signal.signal(signal.SIGTERM, _interrupt)  # uvicorn raises the signal again once drained: end as Ctrl-C does
    try:
        Server(config).run()
    except KeyboardInterrupt:
        pass
    worker.stopping.set()
    worker.join(timeout=30)
    counts = dict(api.state.counts)
    print(f"drained: {drain.get('in_flight_at_signal', 0)} request(s) in flight at the signal, "
          f"{counts.get('200', 0) - drain.get('answered_before_signal', counts.get('200', 0))} answered after it; "
          f"served {counts.get('200', 0)}, refused {counts.get('413', 0) + counts.get('422', 0)}, "
          f"shed {counts.get('503', 0)}", flush=True)
    if args.summary:
        summary = {**drain, "counts": counts, "answered_after_signal": counts.get("200", 0)
                   - drain.get("answered_before_signal", counts.get("200", 0))}
        tmp = args.summary.with_suffix(".tmp")
        tmp.write_text(json.dumps(summary) + "\n")
        os.replace(tmp, args.summary)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def aot_compiled(module: torch.nn.Module, ctx: Context, max_batch: int):
    """module exported with a dynamic batch (torch.export) and compiled ahead of time by AOTInductor
    into a package cached per weights, torch, device and its build: a server loads it at start, and no
    request pays compilation. Only what the answer needs is compiled: an attribute the forward sets
    (the seed's monitoring statistic) is not part of an exported program. Returns the loaded callable."""
    import hashlib
    import warnings

    digest = hashlib.sha256(torch.__version__.encode())
    for k, v in sorted(module.state_dict().items()):
        digest.update(k.encode() + v.detach().cpu().numpy().tobytes())
    digest.update(f"{max_batch}|{ctx.n_features}|{_build_key(ctx.device)}".encode())
    package = ctx.cache_dir / f"{ctx.workload}-{digest.hexdigest()[:20]}.pt2"
    if not package.is_file():
        if ctx.device.type == "cuda":
            _cuda_toolkit()
        example = torch.zeros(min(64, max_batch + 1), ctx.n_features, device=ctx.device)
        # a batch closes once it holds max_batch rows, so its last request may bring up to MAX_CUSTOMERS more
        batch = torch.export.Dim("batch", min=1, max=max_batch + MAX_CUSTOMERS)
        with warnings.catch_warnings(), torch.inference_mode():
            warnings.filterwarnings("ignore", message="The tensor attribute")  # the statistic, left out (above)
            exported = torch.export.export(module, (example,), dynamic_shapes={"x": {0: batch}})
        package.parent.mkdir(parents=True, exist_ok=True)
        tmp = package.with_name(f"{package.stem}.{os.getpid()}.pt2")
        torch._inductor.aoti_compile_and_package(exported, package_path=str(tmp))
        os.replace(tmp, package)  # whole or not at all
    if ctx.prepare_only:  # built: loading it is the server's start, measured there
        return None
    index = (ctx.device.index or 0) if ctx.device.type == "cuda" else -1  # the run's GPU, not the builder's
    return torch._inductor.aoti_load_package(str(package), device_index=index)


def _build_key(device: torch.device) -> str:
    """What a compiled package depends on beyond torch: the GPU's architecture, CUDA and Triton; the
    CPU's vector extensions. A package built on another machine is not reused."""
    if device.type == "cuda":
        import triton

        return f"cuda|sm_{''.join(map(str, torch.cuda.get_device_capability(device)))}|{torch.version.cuda}|" \
               f"{triton.__version__}"
    return f"cpu|{torch.backends.cpu.get_cpu_capability()}"


def _cuda_toolkit() -> None:
    """AOTInductor's CUDA wrapper includes cuda.h from the toolkit torch.utils.cpp_extension.CUDA_HOME
    names, which it guesses from nvcc's folder: a wrapper script there (/usr/local/bin/nvcc) points it at
    a folder without headers. Point it at one that has them, or say what to set."""
    from torch.utils import cpp_extension

    tried = [cpp_extension.CUDA_HOME, os.environ.get("CUDA_HOME"), "/usr/local/cuda",
             str(Path(torch.__file__).parent.parent / "nvidia" / "cu13"),
             str(Path(torch.__file__).parent.parent / "nvidia" / "cuda_runtime")]
    home = next((t for t in tried if t and (Path(t) / "include" / "cuda.h").is_file()), None)
    if home is None:
        raise RuntimeError("AOTInductor on CUDA needs the CUDA toolkit's headers (include/cuda.h): set CUDA_HOME to "
                           f"a toolkit; tried {', '.join(t for t in tried if t)}")
    cpp_extension.CUDA_HOME = os.environ["CUDA_HOME"] = home
