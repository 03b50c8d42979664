"""The offline trace page (common/render/trace_page.py): self-contained (no network reference), every
view drawn from the trace, a pair side by side; opened as a user opens it in headless Chromium with the
network off where Chromium is installed."""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from common.render import trace_page

from conftest import REPO

H100 = REPO / "tests" / "data" / "h100-2026-11-22" / "traces"


@pytest.fixture(scope="module")
def h100_page(tmp_path_factory):
    out = tmp_path_factory.mktemp("page") / "amp_resnet18.html"
    trace_page.write([("slow", H100 / "amp_resnet18_slow.pt.trace.json.gz"),
                      ("fast", H100 / "amp_resnet18_fast.pt.trace.json.gz")], out, "amp / resnet18")
    return out


@pytest.fixture(scope="module")
def cpu_page(tmp_path_factory):
    """A real profiled run on the CPU, read as every run reads its trace: the page it writes beside it."""
    import torch

    from common.measure import profiling, stages

    folder, cpu = tmp_path_factory.mktemp("cpu_run"), torch.device("cpu")
    nn = torch.nn
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Dropout(0.1), nn.Linear(256, 4))
    opt = torch.optim.AdamW(model.parameters())
    with profiling.profiler(folder, "churn_slow", cpu, 3) as prof:
        for _ in range(4):
            model(torch.randn(256, 64)).square().mean().backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    evidence = stages.read_evidence(prof, cpu, 3, [opt])
    assert evidence.page == str(folder / "churn_slow.html")
    return Path(evidence.page)


def test_every_profiled_run_writes_its_page_beside_its_trace(cpu_page):
    text = cpu_page.read_text()
    assert (cpu_page.parent / "churn_slow.pt.trace.json").is_file() and "aten::addmm" in text
    assert text.count("<svg class=breakdown") == 1 and "<svg class=tl" in text and "<svg class=memory" in text
    assert "device self" not in text  # a CPU run's table has no device columns to read as zero


def test_a_run_without_a_readable_trace_has_no_page_and_says_why(tmp_path, capsys):
    bad = tmp_path / "w.pt.trace.json"
    bad.write_text("{not json")
    assert trace_page.beside(bad) is None and "no page for w.pt.trace.json" in capsys.readouterr().err


def test_the_page_needs_no_network(h100_page):
    text = h100_page.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)  # no script, style, font or image fetched
    assert "@import" not in text and "url(" not in text and "<script>" in text and "<style>" in text


def test_a_pair_page_shows_each_view_for_both_twins(h100_page):
    text = h100_page.read_text()
    assert text.count("<div class=col>") == 2
    for title in ("Step time by what filled it", "Memory allocated over the profiled steps", "Operators", "Kernels",
                  "Timeline of the first profiled step"):
        assert text.count(f"<h2>{title}</h2>") == 2, title
    assert text.count("<svg class=breakdown") == 2 and text.count("<div class=tlwrap") == 2
    assert text.count("<svg class=memory") == 2 and "<polyline" in text
    assert "aten::convolution" in text and "group by input shape" in text
    assert re.search(r"GPU utilization \d+\.\d%", text) and "tensor cores (by name)" in text


def test_a_cpu_trace_says_what_it_lacks(tmp_path):
    import json

    trace = tmp_path / "cpu.pt.trace.json"
    trace.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "ts": 0, "dur": 100},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 10, "dur": 50, "args": {"Input Dims": [[2, 3], [3, 4]]}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 70, "dur": 10}]}))
    assert trace_page.main([str(trace)]) == 0
    text = trace_page.page_for(trace).read_text()
    assert trace_page.page_for(trace).name == "cpu.html"
    assert "CPU (no GPU activity)" in text and "GPU utilization not in this trace" in text
    assert "No GPU kernels in this trace (a CPU run)." in text and "[[2, 3], [3, 4]]" in text


def test_bad_arguments_are_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        trace_page.main([str(tmp_path / "missing.json")])
    assert e.value.code == 2 and "no trace at" in capsys.readouterr().err


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def _rgb(colour: str) -> tuple:
    return tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))


@pytest.mark.skipif(not CHROMIUM, reason="no Chromium on this machine (apt-get install chromium)")
@pytest.mark.parametrize("which,kinds", [("h100_page", ("kernel", "CPU op")), ("cpu_page", ("CPU op",))])
def test_headless_chromium_without_network_draws_the_breakdown_the_tables_and_the_timeline(which, kinds, request,
                                                                                            tmp_path):
    """Every route to the network closed (an unreachable proxy, no name resolution): the page still draws
    its charts: each kind's colour of the step breakdown, the tables' header rows, and below the tables
    the timeline's boxes, found in the screenshot."""
    from PIL import Image

    page, shot = request.getfixturevalue(which), tmp_path / "page.png"
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--proxy-server=127.0.0.1:9",
                    "--host-resolver-rules=MAP * ~NOTFOUND", "--window-size=1600,3400", f"--screenshot={shot}",
                    page.as_uri()], check=True, capture_output=True, timeout=120)
    from collections import Counter

    image = Image.open(shot).convert("RGB")
    rows: dict[tuple, list[int]] = {}  # each colour's pixel rows
    for i, p in enumerate(image.getdata()):
        rows.setdefault(p, []).append(i // image.width)
    # a table's header row: a line of its background wider than any text's anti-aliasing makes
    header = [y for y, n in Counter(rows.get(_rgb("#f3f3f3"), [])).items() if n > 300]
    assert header, "no table header drawn"
    for kind in kinds:
        at = rows.get(_rgb(trace_page.COLORS[kind]), [])
        assert len(at) > 200, f"{kind}: {len(at)} pixels"  # the breakdown's bars, not a blank page
        assert sum(y > max(header) for y in at) > 100, f"{kind}: no timeline below the tables"


def test_make_traces_writes_a_page_beside_each_trace_and_lists_it(tmp_path, monkeypatch, capsys):
    from common import env

    traces = tmp_path / "local" / "traces" / "amp" / "churn_fast"
    traces.mkdir(parents=True)
    shutil.copy(H100 / "amp_churn_fast.pt.trace.json.gz", traces)
    monkeypatch.setattr(env, "LOCAL_REPORTS", tmp_path / "local")
    monkeypatch.setattr(env, "REPORTS", tmp_path / "none")
    assert trace_page.main(["--all"]) == 0
    page = traces / "amp_churn_fast.html"
    assert page.is_file() and "1 page(s)" in capsys.readouterr().out
    Path(page).write_text("stale")
    assert trace_page.main(["--all"]) == 0 and page.read_text() == "stale"  # newer than its trace: kept
