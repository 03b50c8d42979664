"""reports/README.md: one row per recipe and workload from each recipe's latest comparison, and an
overview plot (reports/overview.png). Written after every `make recipe-<name>`; `make recipes`
runs them all. `python -m common.index` re-renders it from the saved results.

Every number comes from reports/results/<recipe>/comparison.json; nothing is typed in by hand.
"""
import sys
from pathlib import Path

from common import env, mechanism, memory, plotting, recipes
from common.presets import WORKLOADS
from common.errors import CookbookError, exit_with
from common.report import verdict
from common.results import atomic_write_bytes, atomic_write_text, read_result

HEADER = """# Reports

`make recipe-<name>` writes `<name>.md`, `<name>.png` and `<name>_<workload>_diff.html` here, and
regenerates this page from each recipe's latest run; `make recipes` runs them all. Reports
committed to the repository come only from real GPU runs, produced by `make`, never edited by hand.
`results/` (one JSON per run, with its log) and `traces/` (profiler traces) are generated and not
tracked.
"""


def latest(reports_dir: Path) -> dict:
    """recipe -> its latest comparison, for every recipe that has one."""
    found = {}
    for recipe in recipes.available():
        path = Path(reports_dir) / "results" / recipe / "comparison.json"
        if path.exists():
            found[recipe] = read_result(path)
    return found


def _device(entry) -> str:
    v = entry.get("slow") or entry.get("fast") or {}
    e = v.get("env")
    if not e:
        return "?"
    return e["gpu_name"] if e["device_type"] == "cuda" else f"CPU ({e['cpu']})"


def _date(entry) -> str:
    v = entry.get("slow") or entry.get("fast") or {}
    return (v.get("env") or {}).get("date", "?")[:10]


def rows(comparisons: dict) -> list[dict]:
    out = []
    for recipe, c in comparisons.items():
        try:
            out += _recipe_rows(recipe, c)
        except (KeyError, TypeError, ZeroDivisionError):  # a results file from an older version
            out.append({"recipe": recipe, "workload": "?", "device": "?", "date": "?", "smoke": False, "speedup": None,
                        "significant": False, "result": f"unreadable results: re-run make recipe-{recipe}",
                        "memory": "", "mechanism": "", "parity": ""})
    return out


def _recipe_rows(recipe, c) -> list[dict]:
    out = []
    keys = c.get("evidence_keys", [])
    for workload, entry in c["workloads"].items():
        row = {"recipe": recipe, "workload": workload, "device": _device(entry), "date": _date(entry),
               "smoke": c.get("smoke", False), "speedup": None, "significant": False,
               "result": "failed", "memory": "", "mechanism": "", "parity": ""}
        slow, fast = entry.get("slow"), entry.get("fast")
        ooms = [v for v in ("slow", "fast") if entry.get(v, {}).get("status") == "oom"]
        if ooms:
            row["result"] = " and ".join(ooms) + " ran out of memory"
        if "speedup" in entry:
            row.update(speedup=entry["speedup"], significant=entry["significant"], result=verdict(entry),
                       parity="ok" if entry["parity"]["ok"] else "FAILED")
            a, b = memory.headline_mb(slow["memory"]), memory.headline_mb(fast["memory"])
            row["memory"] = f"{(b / a - 1) * 100:+.0f}%" if a else "n/a"
            cpu = slow["env"]["device_type"] != "cuda"
            key = next((k for k in keys if mechanism.value(k, slow) is not None), None)
            if key:
                row["mechanism"] = (f"{mechanism.label(key, cpu)}: {mechanism.formatted(key, slow)} -> "
                                    f"{mechanism.formatted(key, fast)}")
        out.append(row)
    return out


def _plot(table) -> bytes:
    plt = plotting.pyplot()

    shown = [r for r in table if r["speedup"]]
    fig, ax = plt.subplots(figsize=(7.5, 0.45 * len(shown) + 1.4))
    labels = [f"{r['recipe']} / {r['workload']}" + (" (CPU)" if r["device"].startswith("CPU") else "") for r in shown]
    colors = ["#2a7ab9" if r["significant"] and r["speedup"] >= 1 else "#c0504d" if r["significant"] else "#a0a0a0"
              for r in shown]
    ax.barh(labels[::-1], [r["speedup"] for r in shown][::-1], color=colors[::-1])
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("speedup of the fast twin (median step time; grey: not significant)")
    fig.suptitle("Every recipe, slow vs fast: " + ", ".join(sorted({r["device"] for r in shown})), fontsize=9)
    fig.tight_layout()
    return plotting.png(fig)


def _beyond_recipes(reports_dir: Path) -> list[str]:
    """Links to the diagnoses and ladders present, with their headline from the saved results."""
    out = []
    for w in WORKLOADS:
        md = reports_dir / f"baseline_{w}.md"
        if md.exists():
            verdict = next((line.strip("*.") for line in md.read_text().splitlines() if line.startswith("**")), "")
            out.append(f"- [Diagnosis of the {w} baseline](baseline_{w}.md): {verdict}")
    for w in WORKLOADS:
        path = reports_dir / "results" / "ladder" / f"{w}.json"
        if (reports_dir / f"ladder_{w}.md").exists() and path.exists():
            try:
                rungs = [r for r in read_result(path)["rungs"] if r["status"] == "ok"]
                last = rungs[-1]
                head = (f"{len(rungs)} rungs; the last ({last['name']}) {last['stats']['throughput_per_s']:,.0f} samples/s, "
                        f"{last.get('cumulative', 0):.1f}x the naive pipeline on {_device({'slow': last})}")
            except (KeyError, IndexError, TypeError):
                head = "unreadable results: re-run make ladder"
            out.append(f"- [Ladder: {w}](ladder_{w}.md): {head}")
    return (["## Baselines and ladders", ""] + out + [""]) if out else []


def render(reports_dir: Path) -> list[Path]:
    reports_dir = Path(reports_dir)
    table = rows(latest(reports_dir))
    lines = [HEADER]
    if not table:
        lines += ["No recipe has been run here yet: `make recipes` (or `make recipe-<name>`) fills this page.", ""]
    else:
        lines += ["| recipe | workload | speedup | memory | mechanism (slow -> fast) | parity | device | date |",
                  "|---|---|---:|---:|---|---|---|---|"]
        for r in table:
            device = r["device"] + (", smoke" if r["smoke"] else "")
            lines.append(f"| [{r['recipe']}]({r['recipe']}.md) | {r['workload']} | {r['result']} | {r['memory']} | "
                         f"{r['mechanism']} | {r['parity']} | {device} | {r['date']} |")
        lines.append("")
        if any(r["speedup"] for r in table):
            lines += ["![speedup of every recipe](overview.png)", ""]
        if any(r["device"].startswith("CPU") for r in table):
            lines += ["Rows marked CPU are CPU runs: they check the pipeline, they are not GPU results.", ""]
    lines += _beyond_recipes(reports_dir)
    written = []
    if any(r["speedup"] for r in table):
        atomic_write_bytes(reports_dir / "overview.png", _plot(table))
        written.append(reports_dir / "overview.png")
    atomic_write_text(reports_dir / "README.md", "\n".join(lines))
    return [reports_dir / "README.md"] + written


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        if len(argv) > 1:
            raise CookbookError("usage: python -m common.index [REPORTS_DIR]")
        for p in render(Path(argv[0]) if argv else env.REPO_ROOT / "reports"):
            print(p)
    except CookbookError as e:
        exit_with(e, "common.index")


if __name__ == "__main__":
    main()
