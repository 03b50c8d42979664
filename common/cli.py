"""The flags every recipe script shares; bad input is one line and exit status 2."""
import argparse
import math

from common import presets
from common.errors import CookbookError
from common.workload_specs import workload_spec


class OneLineParser(argparse.ArgumentParser):
    """argparse, but an error is a single line that says where help is."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _int_at_least(lowest: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < lowest:
            raise argparse.ArgumentTypeError(f"must be {lowest} or more, got {value}")
        return value

    return parse


def _number(ok, rule: str):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"must be {rule}, got {text}")
        return value

    return parse


positive_int = _int_at_least(1)
non_negative_int = _int_at_least(0)
non_negative_float = _number(lambda v: v >= 0, "0 or more")
positive_float = _number(lambda v: v > 0 and math.isfinite(v), "more than 0")


def pick(flag: str, text: str | None, names: list[str], what: str = "name") -> list[str]:
    """A comma-separated choice among `names` (all of them when none is given), checked: an unknown
    one is a CookbookError that lists the valid ones."""
    if not text:
        return list(names)
    wanted = list(dict.fromkeys(w.strip() for w in text.split(",") if w.strip()))
    unknown = [w for w in wanted if w not in names]
    if unknown or not wanted:
        raise CookbookError(f"{flag}: no {what} {', '.join(unknown) or 'given'}; choose from {', '.join(names)}")
    return wanted


def split_passthrough(argv: list[str]) -> tuple[list[str], list[str]]:
    """A runner's own flags, and those after `--` that it hands to every script it starts."""
    own = argv.index("--") if "--" in argv else len(argv)
    return argv[:own], argv[own + 1:]


def check_script_flags(args: list[str], workload: str, overrides: dict | None = None, pair: str | None = None,
                       prog: str = "the scripts", extend=None, reserved=(), known_only: bool = False):
    """The flags a runner hands on after `--`, read now by the scripts' own parser (script_parser),
    so that a bad one is one line before any run starts, in that parser's words.
    reserved: the dests the runner sets itself (--out, --trace-dir, ...), refused here rather than
    silently overriding the runner's (a dict: dest -> what to do instead).
    known_only: for a script that may add flags of its own (--script PATH): only the shared flags
    are checked. Returns the namespace."""
    p = script_parser(prog, "", workload, overrides or {}, pair)
    if extend is not None:
        extend(p)
    p.set_defaults(**{dest: None for dest in reserved})  # a given reserved flag is then not None

    def error(message):
        raise CookbookError(f"after --: {message} (as {prog} reads it; see its --help)")

    p.error = error
    ns = p.parse_known_args(args)[0] if known_only else p.parse_args(args)
    for dest in reserved:
        if getattr(ns, dest, None) not in (None, False):
            why = reserved.get(dest) if isinstance(reserved, dict) else None
            raise CookbookError(f"after --: --{dest.replace('_', '-')} is set by the runner itself; "
                                + (why or "leave it out"))
    return ns


def check_value(flag: str, text: str, workload: str, overrides: dict | None = None, pair: str | None = None,
                prog: str = "the scripts"):
    """One value of a script flag (a sweep's knob) by the script parser's own rule: the parsed value,
    or a CookbookError with that rule's words."""
    p = script_parser(prog, "", workload, overrides or {}, pair)

    def error(message):
        raise CookbookError(message)

    p.error = error
    ns = p.parse_args([flag, text])
    return getattr(ns, flag.lstrip("-").replace("-", "_"))


def _preset_help(workload: str, key: str, overrides: dict, pair: str | None) -> str:
    values = [f"{mode}: {presets.defaults(workload, mode, overrides, pair)[key]}" for mode in ("cuda", "cpu", "smoke")]
    return "default " + ", ".join(values)


def script_parser(prog: str, description: str, workload: str, overrides: dict, pair: str | None = None):
    p = OneLineParser(prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    h = lambda key: _preset_help(workload, key, overrides, pair)  # noqa: E731
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto",
                   help="where to run; auto picks CUDA when present (default auto)")
    p.add_argument("--steps", type=positive_int, help=f"timed steps ({h('steps')})")
    p.add_argument("--warmup", type=positive_int, help=f"untimed warm-up steps before timing ({h('warmup')})")
    p.add_argument("--batch-size", type=positive_int, help=f"samples per step ({h('batch_size')})")
    p.add_argument("--min-time", type=non_negative_float, metavar="SECONDS",
                   help=f"time at least this long: more steps than --steps when they are short ({h('min_time')})")
    p.add_argument("--profile-steps", type=non_negative_int,
                   help=f"profiled steps after the timed ones, 0 to skip the profiler ({h('profile_steps')})")
    p.add_argument("--probe-steps", type=non_negative_int,
                   help=f"learning-probe steps on one batch after the run, for the parity check; 0 to skip "
                        f"({h('probe_steps')})")
    for key, what in workload_spec(workload).size_flags.items():  # the workload's own sizes (a crop, ...)
        p.add_argument("--" + key.replace("_", "-"), type=positive_int, help=f"{what} ({h(key)})")
    p.add_argument("--seed", type=int, default=42, help="seed for weights and data order (default 42)")
    p.add_argument("--data", metavar="PATH|synthetic",
                   help="a local copy of the data set, or 'synthetic'; default: the real source, "
                        "else a synthetic stand-in in the real format")
    p.add_argument("--out", metavar="FILE.json",
                   help="result file (default reports/results/<recipe>/<workload>_<variant>.json)")
    p.add_argument("--trace-dir", metavar="DIR",
                   help="profiler trace folder (default reports/traces/<recipe>/<workload>_<variant>)")
    p.add_argument("--phase-timing", action="store_true",
                   help="also time each phase (data, copy, forward, backward, optimizer) of every timed step with "
                        "CUDA events (perf_counter on CPU); adds a few microseconds per phase, so the diagnosis "
                        "uses it and the recipes do not")
    p.add_argument("--trace-later", action="store_true",
                   help="leave the profiled trace unread: the result holds what only this process knows, and the "
                        "trace is read after the run, on any machine (make tour's children; make finalize reads it)")
    p.add_argument("--memory-dir", metavar="DIR",
                   help="during the profiled steps also record memory: the profiler's memory timeline (HTML) and, "
                        "on CUDA, an allocator snapshot (pickle for https://pytorch.org/memory_viz)")
    p.add_argument("--memory-snapshot", action="store_true",
                   help="on CUDA, record the allocator's history over the profiled steps and write its snapshot "
                        "(a pickle PyTorch's memory viewer opens) and the memory timeline beside the trace; on a CPU "
                        "it says that the snapshot needs CUDA")
    p.add_argument("--memory-budget-gb", type=non_negative_float, metavar="GB",
                   help="cap this process's GPU memory at GB (torch.cuda.set_per_process_memory_fraction), as on a "
                        "smaller card; CUDA only")
    p.add_argument("--workers", type=non_negative_int, metavar="N",
                   help="DataLoader worker processes, for the scripts that use a loader (default: all cores but one)")
    p.add_argument("--smoke", action="store_true", help="tiny sizes for CPU checks and tests")
    return p


DOCTOR_MIN_TIMED = 3  # fewer timed steps than this make no doctor's report


def add_doctor_flags(p: argparse.ArgumentParser) -> None:
    """The doctor's measurement flags, read by its runner and passed on to its child as they are."""
    p.add_argument("--step", choices=("auto", "optimizer", "backward", "forward", "batch"), default="auto",
                   help="what ends a step: by default each optimizer.step() of a torch.optim optimizer, else each "
                        "loss.backward() (fastai, Keras: their own optimizers); or each call of the top-level "
                        "model (inference), or each batch drawn from a DataLoader (a hand-written update)")
    p.add_argument("--warmup", type=positive_int, default=5, help="untimed steps first (default 5)")
    p.add_argument("--steps", type=_int_at_least(DOCTOR_MIN_TIMED), default=50, help="timed steps at most (default 50)")
    p.add_argument("--time", type=positive_float, default=15.0,
                   help=f"seconds of timed steps at most, {DOCTOR_MIN_TIMED} steps at least (default 15)")
    p.add_argument("--profile-steps", type=non_negative_int, default=3, help="profiled steps (default 3)")


DOCTOR_FLAGS = ("step", "warmup", "steps", "time", "profile_steps")


def doctor_flags(args) -> list[str]:
    """The doctor flags as the child reads them."""
    return [x for name in DOCTOR_FLAGS for x in (f"--{name.replace('_', '-')}", str(getattr(args, name)))]
