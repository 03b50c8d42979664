"""`make finalize BUNDLE=DIR`: a tour's bundle (make tour) into the reports, on any machine (a CPU
laptop, CI): each pair's report rendered exactly as `make recipe-<name>` renders the same results
(common.render.report), the overview page, the README's GPU column (each figure with its GPU and date;
the bundle's commit below), and the bundle's measured seconds per process into the tour's ledger.

    python -m common.runners.finalize DIR [--reports-dir reports]
"""
import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from common import env
from common.analysis.results import read_result
from common.analysis.results_compare import Comparison
from common.cli import OneLineParser
from common.errors import CookbookError, exit_with
from common.files import atomic_write_text
from common.render import index, readme, report
from common.runners import launch, tour


def parse_args(argv):
    p = OneLineParser(prog="python -m common.runners.finalize", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bundle", help="the tour's bundle folder (tour.json and its volumes)")
    p.add_argument("--reports-dir", help="where the reports go (default: a GPU's bundle reports/, tracked, and the "
                                         "README's column; a CPU's reports/local/, untracked)")
    return p.parse_args(argv)


def place(bundle: Path, manifest: dict, reports: Path) -> None:
    """Each finished pair's files where `make recipe-<name>` would have written them, their paths
    rewritten from the tour's folder to this one."""
    old = manifest["reports_dir"].rstrip("/")
    with tempfile.TemporaryDirectory() as tmp:
        tour.unpack(bundle, manifest, Path(tmp))
        for leg in manifest["legs"].values():
            for name in leg["files"]:
                src, dst = Path(tmp) / name, reports / name
                if not src.exists():  # left out of the volumes (manifest["left_out"]): a trace too large
                    continue
                dst.parent.mkdir(parents=True, exist_ok=True)
                if src.suffix == ".json":
                    atomic_write_text(dst, src.read_text().replace(old, str(reports)))
                else:
                    shutil.copyfile(src, dst)


def merge_ledger(manifest: dict, path: Path | None = None) -> bool:
    """A GPU bundle's seconds per process of the pairs it kept, by leg, and its setup, into the ledger for
    its device (not a CPU's)."""
    if manifest["device"].startswith("CPU") or not manifest.get("costs"):
        return False
    path = path or tour.LEDGER
    ledger = tour.read_ledger(path)
    mine = ledger.setdefault("devices", {}).setdefault(manifest["device"], {})
    mine.update({name: cost for name, cost in manifest["costs"].items() if name in manifest["legs"]})  # kept pairs only
    if manifest.get("setup_s"):
        mine["setup"] = manifest["setup_s"]
    atomic_write_text(path, json.dumps(ledger, indent=1) + "\n")
    return True


def finalize(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    bundle = Path(args.bundle).absolute()
    manifest = tour.read_manifest(bundle)
    if manifest is None:
        raise CookbookError(f"{bundle}: no tour.json there; pass the folder make tour wrote (its last line names it)")
    tour.check_volumes(bundle, manifest)  # a damaged bundle is refused before anything is written
    gpu = not manifest["device"].startswith("CPU")
    reports = Path(args.reports_dir or (env.REPORTS if gpu else env.LOCAL_REPORTS)).absolute()
    place(bundle, manifest, reports)
    rendered = {name: reports / leg["comparison"] for name, leg in manifest["legs"].items()
                if not leg["aa"] and leg["comparison"]}  # the A/A has no report; a served pair's came rendered
    launch.read_traces(list(rendered.values()))
    written = []
    for name, leg in manifest["legs"].items():
        if name in rendered:
            written += report.render(read_result(rendered[name], Comparison, "make tour"), reports)
        print(f"{name:<18} {leg['line']}")
    written += index.render(reports)
    if reports == env.REPORTS.resolve() and gpu:  # only a GPU sitting's finalize changes what is tracked
        readme.main([])
    if merge_ledger(manifest):
        print(f"ledger: {manifest['device']}'s seconds per process -> {env.shown_path(tour.LEDGER)}")
    left_out = manifest.get("left_out") or []
    shown = ", ".join(env.shown_path(p) for p in written[:3]) + (" ..." if len(written) > 3 else "")
    print(f"finalize: {len(manifest['legs'])} pair(s) of {manifest['device']} at {manifest['commit']} "
          f"({manifest.get('date', '?')}) -> {shown}"
          + (f"; left out of the bundle: {len(left_out)} file(s)" if left_out else ""))
    return 0


def main():
    try:
        sys.exit(finalize())
    except CookbookError as e:
        exit_with(e, "common.runners.finalize")


if __name__ == "__main__":
    main()
