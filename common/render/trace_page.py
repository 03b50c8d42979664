"""One self-contained HTML page per profiled run (or a pair's two, side by side), readable offline:
no CDN, no web font, its script, styles and data inline. The views TensorBoard's profiler plugin gave
(common.analysis.trace_views): each step's time by what filled it, the GPU's utilization, SM efficiency
and occupancy where the trace has them, the operator table (sortable, by input shape on demand), the
kernel table, the memory curve, compute against communication for a data-parallel run, and one step's
timeline that zooms (the mouse wheel) and pans (drag).

    python -m common.render.trace_page TRACE [TRACE2] [--out PAGE.html]
    python -m common.render.trace_page --all [--serve] [--port 8008]   # make traces
"""
import html
import sys
from pathlib import Path

from common.analysis import trace_views
from common.errors import CookbookError, exit_with
from common.files import atomic_write_text

COLORS = {"kernel": "#2f6db3", "memcpy": "#e08a1e", "memset": "#c4b21b", "runtime": "#8a55b5",
          "data loading": "#d0453a", "CPU op": "#3f9a55", "other": "#b8b8b8"}
TOP_OPS, TOP_KERNELS = 60, 40
MAX_DEPTH = 8  # the timeline's sub-lanes per thread; deeper calls share the last

STYLE = """
body{font:13px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif;margin:16px;color:#222}
h1{font-size:18px}h2{font-size:15px;margin:18px 0 6px}.cols{display:flex;gap:24px;align-items:flex-start}
.col{flex:1;min-width:0}table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ddd;padding:2px 6px}
th{background:#f3f3f3;cursor:pointer;user-select:none}td.n{text-align:right;font-variant-numeric:tabular-nums}
.tbl{max-height:420px;overflow:auto}.legend span{display:inline-block;margin-right:10px}
.sw{display:inline-block;width:10px;height:10px;margin-right:3px;vertical-align:middle}
svg.tl{display:block;border-bottom:1px solid #eee;cursor:grab;background:#fff}.note{color:#666}
.tlwrap{border:1px solid #ccc}.lane{font-size:10px;color:#555;padding:2px 2px 0}
"""

SCRIPT = """
function sortTable(th){const t=th.closest('table'),i=[...th.parentNode.children].indexOf(th),
 b=t.tBodies[0],r=[...b.rows],d=th.dataset.d==='a'?'d':'a';th.dataset.d=d;
 r.sort((x,y)=>{let a=x.cells[i].dataset.v??x.cells[i].textContent,c=y.cells[i].dataset.v??y.cells[i].textContent;
 const na=parseFloat(a),nc=parseFloat(c);if(!isNaN(na)&&!isNaN(nc)){a=na;c=nc}
 return (a<c?-1:a>c?1:0)*(d==='a'?1:-1)});r.forEach(x=>b.appendChild(x))}
document.querySelectorAll('th').forEach(th=>th.addEventListener('click',()=>sortTable(th)));
document.querySelectorAll('input.byshape').forEach(cb=>cb.addEventListener('change',()=>{
 const t=document.getElementById(cb.dataset.t);t.querySelectorAll('tr.shape').forEach(r=>r.hidden=!cb.checked);
 t.querySelectorAll('tr.whole').forEach(r=>r.hidden=cb.checked)}));
document.querySelectorAll('div.tlwrap').forEach(wrap=>{const w=+wrap.dataset.w,svgs=wrap.querySelectorAll('svg.tl');
 let v=[0,w],drag=null;const set=()=>svgs.forEach(s=>s.setAttribute('viewBox',v[0]+' 0 '+v[1]+' '+s.dataset.h));
 wrap.addEventListener('wheel',e=>{e.preventDefault();const r=wrap.getBoundingClientRect(),
  x=v[0]+(e.clientX-r.left)/r.width*v[1],k=e.deltaY<0?0.8:1.25;v[1]=Math.min(w,Math.max(w/5000,v[1]*k));
  v[0]=Math.min(w-v[1],Math.max(0,x-(x-v[0])*k));set()},{passive:false});
 wrap.addEventListener('mousedown',e=>drag=[e.clientX,v[0]]);window.addEventListener('mouseup',()=>drag=null);
 window.addEventListener('mousemove',e=>{if(!drag)return;const r=wrap.getBoundingClientRect();
  v[0]=Math.min(w-v[1],Math.max(0,drag[1]-(e.clientX-drag[0])/r.width*v[1]));set()})});
"""


def _us(x) -> str:
    return "-" if x is None else f"{x:,.1f}"


def _share(x) -> str:
    return "not in this trace" if x is None else f"{x:.1%}"


def breakdown_svg(rows: list[dict], longest: float) -> str:
    """A stacked bar per step, its kinds in KINDS order, scaled to `longest` (a pair's page: the longest
    step of both, so that the two columns' bars compare)."""
    if not rows:
        return "<p class=note>No step in this trace.</p>"
    longest = longest or 1.0
    width, bar, gap, label = 560, 18, 6, 70
    parts = [f'<svg class=breakdown width="{width + label + 90}" height="{len(rows) * (bar + gap) + 4}" '
             'xmlns="http://www.w3.org/2000/svg">']
    for i, r in enumerate(rows):
        y, x = 2 + i * (bar + gap), label
        parts.append(f'<text x="0" y="{y + 13}" font-size="11">step {html.escape(r["step"])}</text>')
        for k in trace_views.KINDS:
            w = r[k] / longest * width
            if w > 0:
                parts.append(f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{bar}" fill="{COLORS[k]}">'
                             f'<title>{k}: {r[k]:,.1f} us ({r[k] / r["total_us"]:.1%})</title></rect>')
            x += w
        parts.append(f'<text x="{x + 4:.1f}" y="{y + 13}" font-size="11">{r["total_us"] / 1000:.2f} ms</text>')
    legend = "".join(f'<span><i class=sw style="background:{COLORS[k]}"></i>{k}</span>' for k in trace_views.KINDS)
    return "".join(parts) + "</svg>" + f"<div class=legend>{legend}</div>"


def breakdown_table(rows: list[dict]) -> str:
    head = "".join(f"<th>{k}, ms</th>" for k in trace_views.KINDS)
    body = "".join(f"<tr><td>{html.escape(r['step'])}</td>"
                   + "".join(f"<td class=n>{r[k] / 1000:.3f}</td>" for k in trace_views.KINDS)
                   + f"<td class=n>{r['total_us'] / 1000:.3f}</td></tr>" for r in rows)
    return f"<table><thead><tr><th>step</th>{head}<th>total, ms</th></tr></thead><tbody>{body}</tbody></table>"


CURVES = ("#2f6db3", "#d0453a", "#3f9a55", "#8a55b5")  # one per device, in order


def memory_svg(curves: dict[str, list[tuple[float, float]]]) -> str:
    """Each device's allocated memory on one time and one MB scale, labelled where there are several."""
    if not curves:
        return ("<p class=note>No allocator events in this trace (the profiler's profile_memory was off, "
                "or nothing was allocated).</p>")
    every = [p for points in curves.values() for p in points]
    t0, t1 = min(t for t, _ in every), max(t for t, _ in every)
    top = max(mb for _, mb in every) or 1.0
    width, height = 560, 160
    parts = [f'<svg class=memory width="{width + 60}" height="{height + 20}" xmlns="http://www.w3.org/2000/svg">']
    for i, (device, points) in enumerate(curves.items()):
        colour = CURVES[i % len(CURVES)]
        xy = " ".join(f"{(t - t0) / max(t1 - t0, 1e-9) * width:.1f},{height - mb / top * height:.1f}"
                      for t, mb in points)
        parts.append(f'<polyline points="{xy}" fill="none" stroke="{colour}" stroke-width="1.5">'
                     f'<title>{html.escape(device)}</title></polyline>')
        if len(curves) > 1:
            parts.append(f'<text x="{width + 4}" y="{28 + 14 * i}" font-size="11" fill="{colour}">'
                         f'{html.escape(device)}</text>')
    return "".join(parts) + (f'<text x="{width + 4}" y="10" font-size="11">{top:,.0f} MB</text>'
                             f'<text x="0" y="{height + 14}" font-size="11">0 ms</text>'
                             f'<text x="{width - 40}" y="{height + 14}" font-size="11">{(t1 - t0) / 1000:,.1f} ms'
                             "</text></svg>")


def op_table_html(ops: list[dict], ident: str, gpu: bool) -> str:
    whole: dict[str, dict] = {}
    for r in ops:
        w = whole.setdefault(r["name"], {**r, "shapes": "", **{k: 0.0 for k in (
            "calls", "host_total", "host_self", "device_total", "device_self")}})
        for k in ("calls", "host_total", "host_self", "device_total", "device_self"):
            w[k] += r[k]
    keys = ("calls", "host_self", "host_total", "device_self", "device_total")[:5 if gpu else 3]

    def tr(r, cls):
        return (f"<tr class={cls}{' hidden' if cls == 'shape' else ''}><td>{html.escape(r['name'][:90])}</td>"
                f"<td>{html.escape(r['shapes'][:80])}</td>"
                + "".join(f"<td class=n data-v={r[k]}>{_us(r[k])}</td>" for k in keys) + "</tr>")

    top_whole = sorted(whole.values(), key=lambda r: (-r["device_self"], -r["host_self"]))[:TOP_OPS]
    rows = "".join(tr(r, "whole") for r in top_whole) + "".join(tr(r, "shape") for r in ops[:TOP_OPS * 2])
    head = ("<tr><th>operator</th><th>input shapes</th><th>calls/step</th><th>host self, us</th>"
            "<th>host total, us</th>" + ("<th>device self, us</th><th>device total, us</th>" if gpu else "")
            + "</tr>")
    return (f'<label><input type=checkbox class=byshape data-t="{ident}"> group by input shape</label>'
            f'<div class=tbl><table id="{ident}"><thead>{head}</thead><tbody>{rows}</tbody></table></div>'
            f"<p class=note>Per profiled step; the {TOP_OPS} operators with the most "
            f"{'device (then host)' if gpu else 'host'} self time; host self time less the ops it called and its "
            "CUDA runtime calls.</p>")


def _num(value, text: str) -> str:
    """A numeric cell that sorts by its value, not its text (thousands separators, "-")."""
    return f"<td class=n data-v={value if value is not None else -1}>{text}</td>"


def kernel_table_html(kernels: list[dict]) -> str:
    if not kernels:
        return "<p class=note>No GPU kernels in this trace (a CPU run).</p>"
    head = ("<tr><th>kernel</th><th>calls/step</th><th>us/step</th><th>mean us</th><th>blocks per SM</th>"
            "<th>est. achieved occupancy %</th><th>tensor cores (by name)</th></tr>")
    rows = "".join(
        "<tr><td>" + html.escape(k["name"][:110]) + "</td>" + _num(k["calls"], f"{k['calls']:.1f}")
        + _num(k["total"], f"{k['total']:,.1f}") + _num(k["mean"], f"{k['mean']:,.2f}")
        + _num(k["blocks_per_sm"], _us(k["blocks_per_sm"])) + _num(k["occupancy"], _us(k["occupancy"]))
        + f"<td>{'yes' if k['tensor_cores'] else 'no'}</td></tr>" for k in kernels[:TOP_KERNELS])
    return (f"<div class=tbl><table><thead>{head}</thead><tbody>{rows}</tbody></table></div>"
            "<p class=note>Means weighted by each call's time; tensor cores as the kernel's name says (the trace "
            "does not record it).</p>")


def timeline_svg(tl: dict) -> str:
    """A lane per thread or stream, its label above it (outside the zoom, so that it never stretches), a
    sub-lane per nesting depth; the lanes zoom and pan together."""
    rows = tl["rows"]
    if not rows:
        return "<p class=note>No events.</p>"
    width, lane = 1000.0, 12
    scale = width / max(tl["span_us"], 1e-9)
    parts = [f'<div class=tlwrap data-w="{width}">']
    for where, events in rows.items():
        depth = min(max(e[4] for e in events), MAX_DEPTH - 1) + 1
        height = depth * lane
        parts.append(f'<div class=lane>{html.escape(where)}</div><svg class=tl data-h="{height}" '
                     f'viewBox="0 0 {width} {height}" width="100%" height="{height}" preserveAspectRatio="none" '
                     'xmlns="http://www.w3.org/2000/svg">')
        for start, dur, name, kind, d in events:
            parts.append(f'<rect x="{start * scale:.3f}" y="{min(d, MAX_DEPTH - 1) * lane}" '
                         f'width="{max(dur * scale, 0.05):.3f}" height="{lane - 1}" fill="{COLORS.get(kind, "#999")}">'
                         f'<title>{html.escape(name[:120])}: {dur:,.1f} us at {start:,.1f}</title></rect>')
        parts.append("</svg>")
    return "".join(parts) + (f"</div><p class=note>One step, {tl['span_us'] / 1000:.2f} ms, {tl['shown']} of its "
                             f"{tl['of']} events (the longest), an op called by another drawn below it: the mouse "
                             "wheel zooms, a drag pans; hover for names.</p>")


def column(label: str, trace: Path, ident: str, v: dict, longest: float) -> str:
    ov = v["overlap"]
    comm = ("" if ov is None else
            f"<h2>Compute and communication</h2><p>compute kernels {ov['compute_us'] / 1000:.2f} ms, communication "
            f"kernels {ov['communication_us'] / 1000:.2f} ms, both at once {ov['overlapped_us'] / 1000:.2f} ms "
            f"({ov['overlapped_us'] / max(ov['communication_us'], 1e-9):.0%} of communication hidden), over "
            f"{v['steps']} step(s).</p>")
    return (f"<div class=col><h2>{html.escape(label)}: <code>{html.escape(trace.name)}</code></h2>"
            f"<p>{v['steps']} profiled step(s), {'GPU' if v['gpu'] else 'CPU (no GPU activity)'}. "
            f"GPU utilization {_share(v['gpu_utilization'])}; SM efficiency (estimated) {_share(v['sm_efficiency'])}; "
            f"achieved occupancy (estimated) {_share(v['achieved_occupancy'])}.</p>"
            f"<h2>Step time by what filled it</h2>{breakdown_svg(v['breakdown'], longest)}"
            f"{breakdown_table(v['breakdown'])}"
            f"<h2>Memory allocated over the profiled steps</h2>{memory_svg(v['memory'])}{comm}"
            f"<h2>Operators</h2>{op_table_html(v['ops'], ident + '-ops', v['gpu'])}"
            f"<h2>Kernels</h2>{kernel_table_html(v['kernels'])}"
            f"<h2>Timeline of the first profiled step</h2>{timeline_svg(v['timeline'])}</div>")


def render(traces: list[tuple[str, Path]], title: str) -> str:
    views = [trace_views.read(Path(t)) for _, t in traces]
    longest = max((r["total_us"] for v in views for r in v["breakdown"]), default=1.0)  # one scale for a pair
    cols = "".join(column(label, Path(t), f"c{i}", v, longest) for i, ((label, t), v) in enumerate(zip(traces, views)))
    return (f"<!doctype html><html><head><meta charset=utf-8><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
            "<p class=note>Read from the profiler's trace by the cookbook (common/render/trace_page.py): the views "
            "TensorBoard's profiler plugin gave, in one page that needs no network. A step runs from its CPU range "
            "to the end of the GPU work it launched (the plugin's bounds); each instant of it counts once, for the "
            "first of: a kernel, a memcpy, a memset, a CUDA runtime or driver call, the data loader, another CPU op "
            "or annotated range; the rest is other (Python between ops, idle). Unlike the plugin, NCCL's kernels "
            "count as kernels (their overlap with compute is shown apart) and Triton's driver launches as "
            "runtime.</p>"
            f"<div class=cols>{cols}</div><script>{SCRIPT}</script></body></html>")


def page_for(trace: Path) -> Path:
    """Where a trace's page goes: beside it, named after it."""
    name = trace.name
    for suffix in (".gz", ".json", ".pt.trace"):
        name = name[: -len(suffix)] if name.endswith(suffix) else name
    return trace.with_name(name + ".html")


def write(traces: list[tuple[str, Path]], out: Path, title: str) -> Path:
    atomic_write_text(out, render(traces, title))
    return out


def beside(trace: Path) -> str | None:
    """A run's own page, written beside its trace as the run reads it: its path, or None where the trace
    could not be drawn (the run's figures do not depend on its page)."""
    trace = Path(trace)
    try:
        return str(write([("run", trace)], page_for(trace), trace.name))
    except Exception as e:  # a trace this page cannot draw costs the page, never the run's evidence
        print(f"[cookbook] no page for {trace.name}: {type(e).__name__}: {e}", file=sys.stderr)
        return None


TRACE_GLOB = ("*.pt.trace.json", "*.pt.trace.json.gz")


def every_page(roots: list[Path]) -> list[Path]:
    """Each trace's page under `roots` (written where missing or older than its trace), and the pairs'
    pages the reports wrote, sorted."""
    pages = set()
    for root in roots:
        for pattern in TRACE_GLOB:
            for trace in root.rglob(pattern):
                page = page_for(trace)
                if not page.exists() or page.stat().st_mtime < trace.stat().st_mtime:
                    write([("run", trace)], page, trace.name)
                pages.add(page)
        pages |= set(root.glob("*/*.html"))  # reports/traces/<recipe>/<pair>.html
    return sorted(pages)


def serve(root: Path, port: int) -> None:
    """The pages over HTTP on 127.0.0.1 (for a remote machine: ssh -L PORT:127.0.0.1:PORT), until Ctrl-C."""
    import functools
    import http.server

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    with http.server.ThreadingHTTPServer(("127.0.0.1", port), handler) as server:
        print(f"serving {root} on http://127.0.0.1:{port}/ (Ctrl-C stops)", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            print("stopped", flush=True)


def main_all(argv: list[str]) -> int:
    from common import env

    port = int(argv[argv.index("--port") + 1]) if "--port" in argv else 8008
    roots = [r for r in (env.LOCAL_REPORTS / "traces", env.REPORTS / "traces") if r.is_dir()]
    pages = every_page(roots)
    if not pages:
        print("no traces yet: a profiled run writes them (make recipe-amp, make doctor SCRIPT=...)")
        return 0
    for p in pages:
        print(env.shown_path(p))
    print(f"{len(pages)} page(s); each opens in a browser with no network")
    if "--serve" in argv:
        serve(env.REPORTS, port)
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--all" in argv:
        return main_all(argv)
    try:
        out = None
        if "--out" in argv:
            at = argv.index("--out")
            out, argv = Path(argv[at + 1]), argv[:at] + argv[at + 2:]
        paths = [Path(a) for a in argv]
        if not 1 <= len(paths) <= 2:
            raise CookbookError("usage: python -m common.render.trace_page TRACE [TRACE2] [--out PAGE.html]")
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            raise CookbookError(f"no trace at {', '.join(missing)}")
        labels = ["slow", "fast"] if len(paths) == 2 else ["run"]
        out = out or page_for(paths[-1] if len(paths) == 1 else paths[0])
        print(write(list(zip(labels, paths)), out, " vs ".join(p.name for p in paths)))
        return 0
    except CookbookError as e:
        exit_with(e, "common.render.trace_page")
        return 2


if __name__ == "__main__":
    sys.exit(main())
