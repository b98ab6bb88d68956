"""README's Performance tables are the committed bench reports' figures: a table half carried
over from an earlier run, or a cell typed by hand, fails here until it is the run it names."""

from __future__ import annotations

import math
import re

from tests.unit.readme import LINES, README, ROOT, TEXT

BENCH = ROOT / "bench"


def _tokens(cell: str) -> float:
    """``535k`` or ``1.67M``, as the replay report rounds them."""
    return float(cell[:-1]) * {"k": 1e3, "M": 1e6}[cell[-1]]


def test_the_replay_table_is_the_committed_reports() -> None:
    """README's replay table is bench/reports/replay.md's run (the one RESULTS.md dates): each
    cell is the report's, and the last column follows from them, so a table half carried
    over from an earlier run fails here. Headroom's column is issue 23's, not the report's."""
    report = (BENCH / "reports" / "replay.md").read_text()
    files = dict(re.findall(r"^### File (\d+): .*?\n\n(.*?)\n\n", report, re.M | re.S))
    rows = re.findall(r"^\| (\d) \w+ \| (\d+k) \| (.+) \|$", TEXT, re.M)
    assert len(rows) == 8
    for number, limit, cells in rows:
        raw, clearing, masking, headroom, cascade, versus = cells.split(" | ")
        run = {}  # policy: (cache-weighted, cw fast, over limit)
        for line in files[number].splitlines()[2:]:
            c = [x.strip() for x in line.strip("|").split("|")]
            if c[1] == limit:
                run[c[0]] = (c[8], c[9], int(c[5].split("/")[0]))
        over = run["raw"][2]
        assert raw.split(" (")[0] == run["raw"][0] and (over > 0) == (" over)" in raw), raw
        assert over == 0 or f"({over} " in raw, (number, limit, raw)
        best = min(run["clearing"][0], run["clearing-5k"][0], key=_tokens)
        assert (clearing, masking) == (best, run["masking"][0]), (number, limit)
        main, fast = run["cascade-default"][:2]
        assert cascade == (main if fast == "0" else f"{main} (+{fast})"), (number, limit)
        reference = min(_tokens(best), _tokens(masking), _tokens(headroom.split(" (")[0]))
        assert versus == f"−{round(100 * (1 - _tokens(main) / reference))}%", (number, limit)


def _sections(report: str) -> dict[str, dict[str, dict[str, str]]]:
    """Each ``## scenario`` table of a bench report: target -> column -> cell."""
    tables = {}
    for title, body in re.findall(r"^## (.+?)\n\n(.*?)(?=\n## |\Z)", report, re.M | re.S):
        lines = [line for line in body.splitlines() if line.startswith("| ")]
        if not lines:
            continue
        head = [c.strip() for c in lines[0].strip("|").split("|")]
        rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]
        tables[title] = {r[0]: dict(zip(head, r, strict=True)) for r in rows}
    return tables


def test_the_overhead_table_is_the_committed_reports() -> None:
    """README's overhead table is bench/reports/overhead.md's run, each cell its figure to
    three significant digits: the added p50 at c=1, the RPS of two scenarios, the stream's
    first chunk p99."""
    report = (BENCH / "reports" / "overhead.md").read_text()
    tables = _sections(report)
    cells = [
        ("tiny request, c=1", "+p50 ms"),
        ("tiny request, c=32", "RPS"),
        ("agent request ~200 KB, c=8", "RPS"),
        ("streaming, 50 chunks, c=8", "TTFC p99"),
    ]
    rows = {"bare FastAPI": "floor", "Cascade (persistence": "cascade", "LiteLLM proxy": "litellm"}
    checked = 0
    for line in LINES:
        target = next((t for start, t in rows.items() if line.startswith(f"| {start}")), None)
        if target is None:
            continue
        shown = [c.strip().removesuffix(" ms") for c in line.strip("|").split("|")[1:]]
        for (scenario, column), value in zip(cells, shown, strict=True):
            figure = float(tables[scenario][target][column].replace(",", ""))
            unit = 10 ** (math.floor(math.log10(figure)) - 2)  # of the third digit
            assert abs(float(value) - figure) <= unit / 2 + 1e-9, (target, scenario, value)
            checked += 1
    assert checked == 12


def test_the_growth_and_retrieval_figures_are_the_committed_results() -> None:
    """The prose beside the growth and retrieval charts quotes bench/RESULTS.md's run."""
    results = (BENCH / "RESULTS.md").read_text(encoding="utf-8")
    p50 = dict(re.findall(r"^\| compacted \| ([\d,]+) \| ([\d.]+) \|", results, re.M))
    ratio = re.search(r"compacted: latency 5000 vs 100 \| .*? \| ([\d.]+) \|", results)
    full = re.search(r"full: latency 5000 vs 100 \| .*? \| ([\d.]+) \|", results)
    assert ratio and full
    assert (
        f"takes {ratio[1]}x as long at 5,000 ({p50['5,000']} ms against {p50['100']} ms;" in README
    )
    assert f"so cost grows with it ({float(full[1]):.1f}x)" in README
    added = re.search(r"added p50 \(ms\) \| .*? \| ([\d.]+) \|", results)
    rate = re.search(r"embedding, one core \(messages/s\) \| .*? \| ([\d,]+)\.\d+ \|", results)
    builtin = re.search(r"the builtin embedder alone ([\d,.]+)\.", results)
    assert added and rate and builtin
    assert f"took {float(added[1]):.1f} ms more at p50" in README
    assert f"embedded and stored {rate[1]} messages/s" in README
    alone = f"{round(float(builtin[1].replace(',', ''))):,}"
    assert f"(bar 300; the builtin embedder alone: {alone})" in README


def test_the_overhead_prose_is_the_committed_reports() -> None:
    """The ratios and the database's CPU the paragraph under the overhead table quotes."""
    report = (BENCH / "reports" / "overhead.md").read_text()
    one, many, large = (
        _sections(report)[s]
        for s in ("tiny request, c=1", "tiny request, c=32", "agent request ~200 KB, c=8")
    )
    added = float(one["cascade"]["+p50 ms"]) / float(one["floor"]["+p50 ms"])
    assert f"Cascade's added latency at c=1 is {added:.2f}x the floor's" in README
    assert (
        f"It serves {many['cascade']['RPS/LiteLLM']}x LiteLLM's requests per second on the tiny "
        f"request at c=32 ({many['cascade']['RPS/floor']}x the floor's" in README
    )
    assert (
        f"and {large['cascade']['RPS/LiteLLM']}x on the agent request "
        f"({large['cascade']['RPS/floor']}x the floor's)" in README
    )
    tiny, agent = (float(t["cascade"]["DB CPU ms/req"]) for t in (many, large))
    assert f"({tiny:.1f} ms of its CPU per tiny request, {agent:.1f} ms per agent" in README
