"""The doctor's reading of a user's script: the baselines' diagnosis (analysis.diagnosis, the same
cost model) of what the observer measured, then what the compute itself could gain from the
settings the profiled steps show (16-bit, TF32, channels_last, a fused optimizer, attention by hand,
set_to_none, compile or CUDA graphs for a host-bound step, DataLoader workers)."""
from pathlib import Path

from common.analysis.diagnosis import analyse
from common.analysis.results_diagnose import Component, Finding
from common.analysis.results_doctor import DoctorVerdict, Gain, Observation

REST_MIN = 0.2  # a step share outside the phases the doctor sees that is worth its own finding
FLOAT32_MIN = 0.5  # share of matmul and convolution calls in float32 above which 16-bit is a gain
HOST_BOUND = 0.3  # launch overhead share from which compile or CUDA graphs is a gain
DATA_MIN = 0.1  # data loading share from which the DataLoader's settings are a gain
STEP_CV_NOISY = 0.5  # step times varying more than this (CV) make the headline's shares unsure: said in it


def _share(table: dict, keys) -> tuple[float, float]:
    total = sum(table.values())
    return sum(v for k, v in table.items() if k in keys), total


def rest_finding(obs: Observation) -> Finding | None:
    """The step's time outside data, forward, backward and optimizer: the script's own code."""
    t = obs.result.timing
    step = t.summary.mean_ms
    inside = sum(s.mean_ms for s in (t.phase_ms or {}).values())
    share = max(0.0, 1.0 - inside / step) if step else 0.0
    if share < REST_MIN:
        return None
    own = ("the framework's own optimizer step (not a torch.optim one, whose time the doctor sees) and its code "
           "between the phases (callbacks, metrics, host-to-device copies)" if obs.step == "backward" else
           "the script's own code between them (batches built by hand, host-to-device copies, logging, metrics)")
    return Finding("outside the phases", share, f"{share:.0%} of the step ({step - inside:.2f} of {step:.2f} ms) "
                   f"runs outside the DataLoader, the model's calls, backward and the optimizer step: {own}")


def zero_grad_style(obs: Observation) -> str | None:
    """From the script's zero_grad calls (optimizer's or model's), else from the profiled ops."""
    return obs.zero_grad or (obs.ops.zero_grad if obs.ops else None)


def gains_of(obs: Observation, costs: dict[str, float]) -> list[Gain]:
    r, ops = obs.result, obs.ops
    cuda = r.device == "cuda"
    profile = r.env.profile
    has = (lambda need: profile.has(need)) if profile else (lambda need: True)  # noqa: E731
    on = "" if cuda else " (a GPU gain: on this CPU run it is a setting seen, not a cost measured)"
    out = []
    if ops:
        calls = {**{f"matmul {k}": v for k, v in ops.matmul_dtypes.items()},
                 **{f"conv {k}": v for k, v in ops.conv_dtypes.items()}}
        f32, total = _share(calls, ("matmul float32", "conv float32"))
        if total and f32 / total >= FLOAT32_MIN:
            to = ("bfloat16" if has("bf16") else "float16 with a GradScaler (this GPU has no bf16)")
            out.append(Gain("16-bit", f"{f32:.0f} of {total:.0f} matmuls and convolutions per step run in float32: "
                            f"autocast to {to} halves their bytes and runs them on the tensor cores" + on, ["amp"]))
        if cuda and has("tf32") and ops.matmul_dtypes.get("float32") and not r.env.tf32_matmul \
                and r.env.float32_matmul_precision == "highest":
            out.append(Gain("TF32", f"{ops.matmul_dtypes['float32']:.0f} float32 matmuls per step at full precision "
                            "(float32_matmul_precision 'highest'): TF32 runs them on the tensor cores",
                            ["precision"]))
        nchw, convs = _share(ops.conv_layouts, ("NCHW",))
        if convs and nchw / convs >= 0.5:
            out.append(Gain("channels_last", f"{nchw:.0f} of {convs:.0f} convolutions per step take NCHW inputs: "
                            "channels_last (NHWC) is the layout cuDNN's tensor-core kernels want" + on,
                            ["channels_last"]))
        # on a CPU torch's default is the for-loop, while the same code runs foreach on CUDA: there
        # only an optimizer built with foreach=False is one a GPU would run per parameter too
        built_loop = [name for name, f in obs.optimizer_flags.items()
                      if f.get("foreach") is False and not f.get("fused")]
        fused = any(f.get("fused") for f in obs.optimizer_flags.values())
        if not fused and ((cuda and ops.optimizer == "for-loop") or (not cuda and built_loop)):
            why = ("no _foreach_ or _fused_ op in its step" if cuda else "built with foreach=False")
            out.append(Gain("fused optimizer", f"the optimizer ({', '.join(built_loop or obs.optimizers) or '?'}) "
                            f"updates each parameter in its own ops ({why}): foreach, or fused=True on CUDA, "
                            "updates them all in a few kernels" + on, ["fused_ops"]))
    if ops and ops.hand_attention:
        t = ops.hand_attention_t
        out.append(Gain("fused attention", f"{ops.hand_attention:.0f} softmaxes per step over {t} x {t} scores "
                        "between batched matmuls: attention written by hand, which keeps each T x T tensor for "
                        "the backward; F.scaled_dot_product_attention(q, k, v, is_causal=True) runs it as one "
                        "fused kernel that keeps none" + on, ["attention"]))
    if zero_grad_style(obs) == "zeroes":
        out.append(Gain("set_to_none", "zero_grad writes zeros into every gradient (set_to_none=False): "
                        "set_to_none=True frees them instead, one kernel per parameter less", ["set_to_none"]))
    if cuda and has("inductor") and costs.get("launch overhead", 0.0) >= HOST_BOUND \
            and not (r.compile and r.compile.graphs):
        out.append(Gain("compile / CUDA graphs", f"the step is host-bound (launch overhead "
                        f"{costs['launch overhead']:.0%} of it): torch.compile(mode='reduce-overhead') or a "
                        "captured CUDA graph replays it in one launch", ["cuda_graphs", "compile"]))
    data = costs.get("data loading", 0.0)
    for loader in obs.loaders:
        missing = [what for what, off in (("workers", loader.num_workers == 0),
                                          ("pinned memory", cuda and not loader.pin_memory),
                                          ("persistent workers", not loader.persistent_workers)) if off]
        if data >= DATA_MIN and missing:
            out.append(Gain("DataLoader settings", f"data loading costs {data:.0%} of the step and the DataLoader "
                            f"(batch {loader.batch_size}) runs without {', '.join(missing)}", ["dataloader"]))
            break
    return out


def host_reads(obs: Observation) -> list[str]:
    """What no fix from outside can change: the script's own lines that read a tensor on the host
    (measure.syncs: lines that ran; on a GPU only reads of a GPU tensor), each with its rate counted
    over every measured step, so that a read every 10th step is 0.1 per step."""
    folder = Path(obs.script).parent
    out = []
    for where, per_step in sorted(obs.sync_lines.items(), key=lambda kv: (kv[0].rsplit(":", 1)[0],
                                                                          int(kv[0].rsplit(":", 1)[1]))):
        name, line = where.rsplit(":", 1)
        try:
            text = (folder / name).read_text(errors="replace").splitlines()[int(line) - 1].strip()
        except (OSError, IndexError):
            text = "?"
        out.append(f"{where}: `{text}` ({per_step:.3g} per step: a host sync in the step; the recipe `sync_removal` "
                   "keeps the value on the device and reads it after the loop)")
    return out


def blind_spots(obs: Observation) -> list[str]:
    """What this run could not see, said rather than left out."""
    r = obs.result
    out = []
    if r.device != "cuda":
        out.append("No GPU: kernels per step, the GPU's idle share, launch overhead, HolisticTraceAnalysis and NVML "
                   "need CUDA. Host syncs are counted as .item() calls, which cost next to nothing on a CPU; the "
                   "16-bit, TF32 and channels_last gains are GPU gains. Every time here is a CPU time.")
    if not obs.loaders:
        out.append("No DataLoader seen: batches the script builds itself count in the time outside the phases.")
    elif r.device == "cuda":
        out.append("Host-to-device copies the script makes count in the rest of the step (`make diagnose-*` "
                   "counts its baselines' copies with data loading).")
    if r.evidence is None:
        out.append("No profiled steps: no op views, syncs, trace or settings read from ops.")
    return out


def read(obs: Observation) -> DoctorVerdict:
    """The verdict: the diagnosis' findings ranked by measured cost (plus the time outside the phases
    the doctor sees, where it is large), the headline the largest, then the gains."""
    d = analyse(obs.result)
    if not obs.loaders and len(d.findings) > 1:  # no DataLoader: no loading to measure, nor a loader to advise on
        d.findings = [f for f in d.findings if f.kind != "data loading"]
        d.bottleneck.costs.pop("data loading", None)
    t = obs.result.timing
    inside = sum(c.mean_ms for c in d.components)
    if d.components and t.summary.mean_ms > inside:
        rest_ms = t.summary.mean_ms - inside
        d.components.append(Component(phase="rest of the step", mean_ms=rest_ms, share=rest_ms / t.summary.mean_ms))
    rest = rest_finding(obs)
    if rest is not None:
        d.findings = sorted(d.findings + [rest], key=lambda f: f.cost, reverse=True)
        d.bottleneck.costs = {f.kind: f.cost for f in d.findings}
        d.verdict = d.findings[0].says
    top = d.findings[0]
    where = "" if obs.result.device == "cuda" else " (CPU run)"
    cv = t.summary.cv
    noisy = (f"; but its step times varied by CV {cv:.0%}, too much for these shares to be sure: a busy "
             "machine (try an idle one, fewer threads with --cpus, or a longer --time) or the script's own "
             "uneven steps (loader stalls, work every N steps)") if cv > STEP_CV_NOISY else ""
    said = f"{top.says[0].upper() + top.says[1:]}{where}{noisy}"
    return DoctorVerdict(headline=busy_first(obs, said), diagnosis=d, gains=gains_of(obs, d.bottleneck.costs),
                         blind=blind_spots(obs))


def busy_first(obs: Observation, headline: str, load=None) -> str:
    """A headline with the machine's load said first where other processes took CPU the run needed:
    its times are then the machine's, not the script's alone. `load`: the runs' own where the headline
    reports other runs than the observation's (--try's)."""
    load = load or (obs.result.load if obs.result else None)
    if load is None or not load.busy:
        return headline
    return (f"The machine was busy: {load.words()} during the timed steps, so these times are the machine's as "
            "much as the script's (rerun on an idle machine, or on cores nobody else uses with --cpus); as "
            f"measured: {headline[0].lower() + headline[1:]}")
