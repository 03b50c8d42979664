"""matplotlib without a display, a figure as PNG bytes (written atomically by the caller), and the
pieces every plot of a speedup shares: a log axis labelled 0.5x, 1x, 2x, 4x whose limits come from
the point estimates, intervals clipped to that axis with a caret where they run past it, the
verdicts' colours and legend, a knob (batch size, workers) labelled with its plain values."""
import io
import math
import textwrap

VERDICT_COLORS = {"faster": "#2a7ab9", "slower": "#c0504d", "undecided": "#a0a0a0",
                  "no meaningful difference": "#a0a0a0"}
VERDICT_LEGEND = {"faster": "faster (interval above 1x)", "slower": "slower (interval below 1x)",
                  "undecided": "no difference shown", "no meaningful difference": "no difference shown"}
TEXT_COLORS = {"faster": "#1f5f91", "slower": "#a03c39", "undecided": "#404040", "no meaningful difference": "#404040"}
CLIPPED = "interval runs past the axis"
MARGIN = 1.25  # the speedup axis reaches this factor beyond the extreme point estimates (and 1x), then a power of 2
MAX_TICKS = 8


def pyplot():
    """matplotlib.pyplot on the Agg backend; imported on demand, since only reports need it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", pad_inches=0.08)
    pyplot().close(fig)
    return buf.getvalue()


def wrap(text: str, width: int) -> str:
    """A long title or caption on lines of at most `width` characters."""
    return "\n".join(textwrap.wrap(text, width, break_on_hyphens=False)) or text


def speedup_text(v: float) -> str:
    """0.5 -> '0.5x', 1 -> '1x', 4 -> '4x'."""
    return f"{v:g}x"


def speedup_limits(ratios, margin=MARGIN) -> tuple[float, float]:
    """Axis limits from the point estimates (never from an interval's ends), with 1x always in view:
    `margin` beyond the extremes, widened to the next powers of 2, so both ends carry a tick."""
    values = [r for r in ratios if r is not None and r > 0] + [1.0]
    lo, hi = min(values) / margin, max(values) * margin
    return 2.0 ** math.floor(math.log2(lo)), 2.0 ** math.ceil(math.log2(hi))


def speedup_ticks(axis, lo: float, hi: float) -> None:
    """Ticks at the powers of 2 between lo and hi (every other one, and so on, past MAX_TICKS), 1x
    always among them, labelled '0.5x', '1x', '2x'."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    exps = range(math.ceil(math.log2(lo) - 1e-9), math.floor(math.log2(hi) + 1e-9) + 1)
    step = max(1, math.ceil(len(exps) / MAX_TICKS))
    axis.set_major_locator(FixedLocator([2.0 ** e for e in exps if e % step == 0]))
    axis.set_major_formatter(FuncFormatter(lambda v, _: speedup_text(v)))
    axis.set_minor_locator(NullLocator())


def speedup_axis(ax, ratios, which="y") -> tuple[float, float]:
    """The speedup on a log-2 axis of `ax` ('x' or 'y'), limits from the point estimates, ticks in x,
    a line at 1x; returns the limits."""
    lo, hi = speedup_limits(ratios)
    if which == "y":
        ax.set_yscale("log", base=2)
        ax.set_ylim(lo, hi)
        ax.axhline(1.0, color="black", lw=0.8, zorder=1)
    else:
        ax.set_xscale("log", base=2)
        ax.set_xlim(lo, hi)
        ax.axvline(1.0, color="black", lw=0.8, zorder=1)
    speedup_ticks(ax.yaxis if which == "y" else ax.xaxis, lo, hi)
    return lo, hi


def clip_interval(low: float, high: float, lo: float, hi: float) -> tuple[float, float, bool, bool]:
    """The part of [low, high] inside the axis [lo, hi], and whether its low and its high end were cut."""
    return min(max(low, lo), hi), max(min(high, hi), lo), low < lo, high > hi


def speedup_intervals(ax, positions, speedups, which="y", color="black") -> bool:
    """Each speedup's interval as a bar with caps, clipped to the axis's current limits; a caret at
    the axis's edge where an interval runs past it. Call after speedup_axis. Returns whether any was
    clipped (for the legend: clipped_handle)."""
    lo, hi = ax.get_ylim() if which == "y" else ax.get_xlim()
    cap, up, down = ("_", "^", "v") if which == "y" else ("|", ">", "<")
    clipped = False
    for pos, s in zip(positions, speedups):
        if s is None or s.low is None:
            continue
        a, b, cut_low, cut_high = clip_interval(s.low, s.high, lo, hi)
        line = ([pos, pos], [a, b]) if which == "y" else ([a, b], [pos, pos])
        ax.plot(*line, color=color, lw=1, zorder=2, solid_capstyle="butt")
        for end, cut, caret in ((a, cut_low, down), (b, cut_high, up)):
            xy = (pos, end) if which == "y" else (end, pos)
            ax.plot(*xy, marker=caret if cut else cap, ms=7 if cut else 8, mew=1.2, color=color, zorder=4,
                    clip_on=False)
        clipped |= cut_low or cut_high
    return clipped



def speedup_bars(ax, speedups, labels) -> bool:
    """Horizontal bars from 1x on a log axis, one per speedup (bottom to top), coloured by verdict,
    each with its clipped interval and its number on the right. Returns whether any interval was
    clipped (for the legend)."""
    ys = list(range(len(speedups)))
    speedup_axis(ax, [s.ratio for s in speedups], "x")
    for y, s in zip(ys, speedups):
        ax.barh([y], [s.ratio - 1], left=1, height=0.6, color=VERDICT_COLORS.get(s.verdict, "#a0a0a0"))
    clipped = speedup_intervals(ax, ys, speedups, "x")
    ax.set_ylim(-0.6, len(speedups) - 0.4)
    ax.set_yticks(ys, labels)
    right = ax.secondary_yaxis("right")
    right.set_yticks(ys, [f"{s.ratio:.2f}x" + (f" ({s.low:.2f}-{s.high:.2f})" if s.low is not None else "")
                          for s in speedups], fontsize=8)
    right.tick_params(length=0, pad=10)
    return clipped

def verdict_handles(verdicts, clipped=False, which="y") -> list:
    """Legend entries: one per verdict colour shown, and the caret where an interval was clipped."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    labels = dict.fromkeys(VERDICT_LEGEND[v] for v in ("faster", "slower", "undecided", "no meaningful difference")
                           if v in set(verdicts))
    colors = {VERDICT_LEGEND[v]: c for v, c in VERDICT_COLORS.items()}
    handles = [Patch(color=colors[label], label=label) for label in labels]
    if clipped:
        handles.append(Line2D([], [], marker="^" if which == "y" else ">", ls="none", color="black", label=CLIPPED))
    return handles


def knob_axis(ax, values, which="x") -> None:
    """A knob (batch size, DataLoader workers) on a log-2 axis (symlog where it starts at 0), its
    ticks at the values measured, labelled as plain numbers: 2, 4, 8, not 2^1."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    values = sorted(set(values))
    if not values:
        return
    scale = {"value": "symlog", "base": 2, "linthresh": 1, "linscale": 0.5} if values[0] <= 0 else \
        {"value": "log", "base": 2}
    set_scale, set_lim, axis = ((ax.set_xscale, ax.set_xlim, ax.xaxis) if which == "x"
                                else (ax.set_yscale, ax.set_ylim, ax.yaxis))
    set_scale(**scale)
    low = -0.4 if values[0] <= 0 else values[0] / 1.3
    set_lim(low, values[-1] * 1.3 if values[-1] > 0 else 1)
    axis.set_major_locator(FixedLocator(values))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_locator(NullLocator())


def count_axis(axis, log=False) -> None:
    """Counts (samples/s) as 200k, 1M rather than 2x10^5; on a log axis, ticks at 1, 2 and 5 of each decade."""
    from matplotlib.ticker import EngFormatter, LogLocator, NullLocator

    if log:
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_minor_locator(NullLocator())
    axis.set_major_formatter(EngFormatter(sep=""))
