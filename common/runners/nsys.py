"""Run a recipe's pairs under Nsight Systems with the harness's NVTX ranges.

    python -m common.runners.nsys amp [--smoke]   ->  reports/traces/<recipe>/<workload>_<variant>.nsys-rep
"""
import shutil
import subprocess
import sys

from common import catalog
from common.cli import OneLineParser
from common.env import REPO_ROOT
from common.errors import CookbookError, exit_with


def main(argv=None):
    p = OneLineParser(prog="python -m common.runners.nsys", description=__doc__)
    p.add_argument("recipe")
    p.add_argument("--smoke", action="store_true")
    args = p.parse_args(argv)
    try:
        recipe = catalog.check_stepped(args.recipe, "Nsight Systems")
        nsys = shutil.which("nsys")
        if nsys is None:
            raise CookbookError("nsys not found: install NVIDIA Nsight Systems (it comes with the CUDA toolkit) "
                                "and put nsys on PATH, or open the torch.profiler traces with make tensorboard")
    except CookbookError as e:
        exit_with(e, "common.runners.nsys")
    status = 0
    for workload in catalog.workloads(recipe):
        for variant in catalog.VARIANTS:
            out = REPO_ROOT / "reports" / "traces" / recipe / f"{workload}_{variant}"
            out.parent.mkdir(parents=True, exist_ok=True)
            cmd = [nsys, "profile", "--trace=cuda,nvtx,osrt", "--force-overwrite=true", "-o", str(out),
                   sys.executable, "-m", f"recipes.{recipe}.{workload}_{variant}", "--profile-steps", "0",
                   "--out", str(REPO_ROOT / "reports" / "results" / recipe / f"{workload}_{variant}_nsys.json")]
            if args.smoke:
                cmd.append("--smoke")
            print(" ".join(cmd), flush=True)
            status |= subprocess.run(cmd, cwd=REPO_ROOT).returncode
            print(f"-> {out}.nsys-rep (open in nsys-ui; `nsys stats {out}.nsys-rep` for tables)", flush=True)
    sys.exit(1 if status else 0)


if __name__ == "__main__":
    main()
