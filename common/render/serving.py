"""The served recipe's report (reports/<recipe>.md) and its plot: p99 latency against offered load for
both twins with the SLA line, the rate each sustains within the SLA over processes, the cold start,
parity of the answers, what the server refused or drained, and where a request's time went."""
from statistics import median

from common import env
from common.analysis import figures, stats
from common.analysis.aggregate import parity_failure
from common.analysis.load import CLIENT_LAG_SHARE, CLIENT_SHORT
from common.analysis.results_run import Stamp
from common.files import atomic_write_bytes, atomic_write_text
from common.render import diffs, page, plots


def _ms(v) -> str:
    return "-" if v is None else f"{v:.1f}"


def curve(runs, sla_ms: float) -> list[dict]:
    """Per offered rate, over the processes that reached it: the median of each figure."""
    rows = []
    for rate in sorted({p["rate"] for t in runs for p in t.points}):
        at = [p for t in runs for p in t.points if p["rate"] == rate]
        p50s = [p["p50_ms"] for p in at if p["p50_ms"] is not None]
        p99s = [p["p99_ms"] for p in at if p["p99_ms"] is not None]
        rows.append({"rate": rate, "processes": len(at), "p50": median(p50s) if p50s else None,
                     "p99": median(p99s) if p99s else None,
                     "failed": sum(p["rejected_503"] + p["errors"] + p["timeouts"] for p in at),
                     "sent": sum(p["sent"] for p in at),
                     "rows_per_forward": median([p["server"].get("rows_per_forward") or 0 for p in at]),
                     "lag": max((p["send_lag_p99_ms"] or 0) for p in at),
                     "offered": min(p.get("offered_per_s", rate) for p in at),
                     "clients": max(p.get("clients", 1) for p in at),
                     "client_saturated": any(p.get("client_saturated") for p in at)})
    return rows


def plot(found, pair: str, sla_ms: float, title: str) -> bytes:
    plt = plots.pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for variant, color in (("slow", "#c0504d"), ("fast", "#2a7ab9")):  # the server's figures only
        rows = [r for r in curve(found[pair]["runs"][variant], sla_ms) if r["p99"] is not None
                and not r["client_saturated"]]
        ax.plot([r["rate"] for r in rows], [r["p99"] for r in rows], "o-", color=color, label=f"{variant} twin")
    ax.axhline(sla_ms, color="black", linestyle="--", linewidth=1, label=f"SLA: p99 <= {sla_ms:g} ms")
    if ax.lines[:-1] and any(len(line.get_xdata()) for line in ax.lines[:-1]):  # a log axis needs a point
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel("offered load, requests/s (open loop)")
    ax.set_ylabel("p99 latency, ms (median over processes)")
    ax.set_title(plots.wrap(title, 60), fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    return plots.png(fig)


def _per_forward(f, cpu: bool) -> str:
    if not f:
        return "-"
    return (f"{f['host_ms']:.2f}, " + ("- (CPU)" if cpu else f"{f['device_ms']:.2f}") + f", {f['syncs']:.1f} "
            f"({f['forwards']} forwards)")


def figure_words(runs) -> str:
    rates = [t.sla_rate for t in runs]
    limits = [t.client_limit for t in runs if getattr(t, "client_limit", None)]
    if limits:
        return (f"at least {min(rates):g} req/s (the load generator could not offer {min(limits):g} req/s, so no "
                "higher rate counts; more client cores, or fewer rates, measure the crossing)" if min(rates) else
                f"not measured (the load generator could not offer even {min(limits):g} req/s)")
    if any(t.sla_censored for t in runs):
        return f"met the SLA at every swept rate (at least {min(rates):g} req/s; sweep higher with `--rates`)"
    if not all(rates):
        return f"missed the SLA at the lowest swept rate in {sum(not r for r in rates)} of {len(rates)} process(es)"
    spread = f" (processes: {', '.join(f'{r:.0f}' for r in rates)})" if len(rates) > 1 else ""
    return f"{median(rates):.0f} req/s{spread}"


def section(plan, pair: str, found: dict, verdict: dict) -> list[str]:
    slow, fast = found["runs"]["slow"], found["runs"]["fast"]
    cpu = (slow[0].stamp or {}).get("device_type") != "cuda"
    s = verdict["speedup"]
    out = [f"## {pair}", ""]
    lead = (stats.describe(s, "fast") + " in the rate sustained within the SLA" if s is not None
            else "no ratio: a twin's SLA rate was not measured within the sweep (see below)")
    out.append(f"**{lead}.** SLA rate (the offered load at which p99 crosses {plan.sla_ms:g} ms, interpolated "
               f"between the swept rates): slow {figure_words(slow)}; fast {figure_words(fast)}."
               + (" CPU run: not a GPU result." if cpu else ""))
    out.append("")
    cold = {v: median(t.cold_start_s for t in found["runs"][v]) for v in ("slow", "fast")}
    prep = found.get("prepare_s", {})
    out.append(f"- Cold start (process start to its first answer, median): slow {cold['slow']:.2f} s, fast "
               f"{cold['fast']:.2f} s; built ahead of time, before any server started: slow "
               f"{prep.get('slow', 0):.1f} s, fast {prep.get('fast', 0):.1f} s (the trained weights, cached; the fast "
               "twin's AOTInductor package, cached per weights and torch version, which a server then only loads)")
    par = verdict["parity"]
    if par.ok:
        out.append(f"- Parity of the {par.what} (passed): {par.answers_compared} customers, each its own request, "
                   f"many in flight at once; every answer within {par.max_abs:.2g} of the slow twin's answer to the "
                   f"same customer (tolerance {par.atol:.2g})")
    else:
        out.append(f"- **Parity FAILED**: {parity_failure(par)}")
    for name, runs in (("slow", slow), ("fast", fast)):
        refused = all(all(t.rejected_422.values()) for t in runs)
        drained = [t.drain for t in runs]
        out.append(f"- Robustness ({name}): malformed requests (not JSON, a wrong feature count, a NaN) "
                   + ("each refused with a 422 and a one-line reason, the server serving on" if refused
                      else f"**not all refused as they should be**: {[t.rejected_422 for t in runs]}")
                   + f"; Ctrl-C under load: {sum(d['in_flight_at_signal'] or 0 for d in drained)} request(s) in "
                   f"flight at the signal, {sum(d['answered_after_signal'] or 0 for d in drained)} answered after it, "
                   f"{sum(d['refused'] for d in drained)} refused at the closed door, exit codes "
                   f"{', '.join(str(d['exit_code']) for d in drained)}; 503s (queue full) over the sweep: "
                   f"{sum(p['rejected_503'] for t in runs for p in t.points)}, timeouts: "
                   f"{sum(p['timeouts'] for t in runs for p in t.points)}")
    out += ["", f"![p99 against offered load]({plan.recipe}_{pair}.png)", ""]
    out += ["| offered, req/s | slow p50 | slow p99 | slow failed | slow rows/forward | fast p50 | fast p99 | "
            "fast failed | fast rows/forward |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    cs, cf = ({r["rate"]: r for r in curve(runs, plan.sla_ms)} for runs in (slow, fast))
    for rate in sorted(set(cs) | set(cf)):
        cells = []
        for c in (cs, cf):
            r = c.get(rate)
            if r and r["client_saturated"]:
                cells += [f"not counted: the client sent {r['offered']:.0f}/s from {r['clients']} process(es)"]
                cells += [""] * 3
                continue
            cells += ([_ms(r["p50"]), _ms(r["p99"]), f"{r['failed']}/{r['sent']}", f"{r['rows_per_forward']:.1f}"]
                      if r else ["not offered (the sweep ended below)"] + [""] * 3)
        out.append(f"| {rate:g} | " + " | ".join(cells) + " |")
    counted = [r for c in (cs, cf) for r in c.values() if not r["client_saturated"]]
    lag = max((r["lag"] for r in counted), default=0.0)
    most = max(r["clients"] for c in (cs, cf) for r in c.values())
    short = sorted({r["rate"] for c in (cs, cf) for r in c.values() if r["client_saturated"]})
    out += ["", "Latency in ms from each request's due time (open loop: a request the client sent late counts "
                f"late). The load generator: at most {most} client process(es); its own lag, p99 over the rates "
                f"counted: {lag:.1f} ms; a rate counts only where it sent at {CLIENT_SHORT:.0%} of the offered rate "
                f"or more, with a lag within {CLIENT_LAG_SHARE:.0%} of the SLA"
                + (f". It could not offer {', '.join(f'{r:g}' for r in short)} req/s: those rows are the client's, "
                   "not the server's, and no figure above comes from them" if short else ""), ""]
    out += ["### Where a request's time went (profiled window, round 1)", "",
            "| twin | offered, req/s | queue p50 / p99, ms | batching wait p50 / p99 | forward p50 / p99 | "
            "rows per forward | per forward: host ms, device ms, host syncs | trace |",
            "|---|---:|---|---|---|---:|---|---|"]
    for name, runs in (("slow", slow), ("fast", fast)):
        pr = runs[0].profile
        if not pr:
            continue
        w = pr["server"]

        def part(k, w=w):
            return f"{_ms(w[k]['p50'])} / {_ms(w[k]['p99'])}" if w.get(k) else "-"
        out.append(f"| {name} | {pr['rate']:g} | {part('queue_ms')} | {part('batching_ms')} | {part('forward_ms')} | "
                   f"{(w.get('rows_per_forward') or 0):.1f} | {_per_forward(pr.get('figures'), cpu)} | "
                   + (f"[{pr['trace'].split('/')[-1]}]({pr['trace']})" if pr["trace"] else "not written")
                   + (f", [its page]({pr['page']})" if pr.get("page") else "") + " |")
    out += ["", "The server's view: queue = waiting while earlier forwards ran; batching wait = the model "
            "thread waiting for company (the fast twin's bounded wait); forward = the batch's model call, answers "
            "on the host. From the trace, per forward: the model thread's host time in it, the GPU's time (kernels, "
            "copies), and the host syncs (`.item()`'s `aten::_local_scalar_dense`, a stream or device sync). "
            "Open a trace's page in any browser (no network needed), or the trace in Perfetto (ui.perfetto.dev) or "
            "TensorBoard (`make tensorboard`).", ""]
    html = f"{plan.recipe}_{pair}_diff.html"
    atomic_write_text(plan.reports_dir / html, diffs.html(plan.recipe, pair))
    out += [f"### The diff ({diffs.changed_lines(plan.recipe, pair)} changed lines; [side by side]({html}))", "",
            "```diff", diffs.unified(plan.recipe, pair), "```", ""]
    return out


def write(plan, found: dict, verdicts: dict):
    from common import catalog

    title = catalog.spec(plan.recipe).title
    first = next(iter(found.values()))["runs"]["slow"][0]
    stamp = Stamp.from_json(first.stamp) if first.stamp else None
    cpu = stamp is None or stamp.device_type != "cuda"
    rates = ", ".join(f"{r:g}" for r in plan.rates)
    lines = [f"# {title} (`{plan.recipe}`)", "",
             f"Generated by `make recipe-{plan.recipe}`" + (" (smoke sizes)" if plan.smoke else "")
             + f": each twin a real server on 127.0.0.1 (FastAPI on uvicorn), offered {rates} "
             f"requests/s for {plan.duration_s:g} s each, open loop, {plan.rounds} process(es) per twin, slow and "
             f"fast alternating. SLA: p99 <= {plan.sla_ms:g} ms with every request answered."
             + (" **CPU run: not a GPU result**; server, model and load generator share this machine's cores."
                if cpu else ""), ""]
    for pair, f in found.items():
        lines += section(plan, pair, f, verdicts[pair])
        atomic_write_bytes(plan.reports_dir / f"{plan.recipe}_{pair}.png",
                           plot(found, pair, plan.sla_ms, f"{title}: p99 against offered load ({pair})"))
    data = first.data_source or {}
    lines += ["## Where and how it ran", "", "| | |", "|---|---|",
              f"| device | {env.device_name(stamp) if stamp else '?'} |",
              f"| torch | {stamp.torch if stamp else '?'} |", f"| commit | {stamp.git_commit if stamp else '?'} |",
              f"| date | {stamp.date if stamp else '?'} |", f"| data | {data.get('note', '?')} |",
              f"| command | `{plan.command}` |", f"| results | `{plan.results_dir.relative_to(plan.reports_dir)}` |",
              "", stats.footnote(figure="its SLA rate, compared as time per request"), ""]
    facts = {"kind": "recipe", "recipe": plan.recipe, "smoke": plan.smoke, "pairs": {
        pair: {"ratio": v["speedup"].ratio, "low": v["speedup"].low, "high": v["speedup"].high,
               "verdict": v["speedup"].verdict, "processes": v["speedup"].processes, "floor": v["speedup"].floor,
               "batch_size": None, "goal": ""} for pair, v in verdicts.items() if v["speedup"] is not None},
        **figures.stamp_facts(stamp)}
    lines.append(figures.comment(facts))
    path = plan.reports_dir / f"{plan.recipe}.md"
    page.write(path, "\n".join(lines) + "\n")
    return path
