"""A measured process's phase timeline (common.measure.timeline) and its table (common.render.timeline)."""
import time

from common.analysis.timeline import PHASES, durations
from common.measure.timeline import Timeline
from common.render import timeline as render

from tests_helpers import run_result


def test_marks_are_seconds_since_the_process_began_and_never_before_it():
    t = Timeline(started=time.time() - 2.0)
    t.mark("imports", at=t.started - 5.0)  # imported by a fork server before this process was forked
    t.mark("setup")
    assert t.marks["imports"] == 0.0 and 1.9 < t.marks["setup"] < 3.0
    assert durations({"imports": 1.0, "setup": 1.5, "data": 4.0}) == {"imports": 1.0, "setup": 0.5, "data": 2.5}


def test_the_table_gives_each_phase_and_what_a_process_costs_beyond_its_steps():
    r = run_result()  # warm-up 0.1 s, timed 20 steps of about 10 ms
    r.timeline = {"imports": 5.0, "setup": 5.3, "data": 5.4, "model": 10.0, "warm-up": 10.1, "timed": 10.3,
                  "result": 10.4, "exit": 11.4}
    table = render.markdown([("churn_slow_r1", r)])
    header = "| process | imports | setup | data | model | warm-up | timed | result | exit"
    assert table.splitlines()[0].startswith(header)
    row = table.splitlines()[2]
    assert row.startswith("| churn_slow_r1 | 5.00 | 0.30 | 0.10 | 4.60 | 0.10 | 0.20 | 0.10 | 1.00 | 11.4 |")
    assert abs(render.overhead_s(r) - (11.4 - 0.1 - r.timing.timed_wall_s)) < 1e-9
    assert list(PHASES)[-1] == "exit"
