"""The pictures ``--plot FILE`` draws: read back from their SVG (its text kept as text), bar by bar."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from threadkeeper import plots
from threadkeeper.bench import Target, checked
from threadkeeper.cli import main

SVG = "{http://www.w3.org/2000/svg}"


def _texts(svg: Path, fill: str | None = None) -> list[str]:
    """The picture's text, in drawing order (only the text of colour ``fill`` when given)."""
    return ["".join(t.itertext()).strip() for t in ET.parse(svg).iter(f"{SVG}text")
            if fill is None or f"fill: {fill}" in t.get("style", "")]


def _drawn(element: ET.Element) -> list[ET.Element]:
    """The paths under ``element`` outside the legend."""
    if element.get("id", "").startswith("legend"):
        return []
    return [element] if element.tag == f"{SVG}path" else [p for child in element for p in _drawn(child)]


def _bars(svg: Path, fill: str) -> list[tuple[float, float]]:
    """The width and height of each rectangle filled with ``fill``, plain or hatched (a hatching is a pattern over
    that colour), the legend's aside, in drawing order."""
    root = ET.parse(svg).getroot()
    hatched = {f"url(#{p.get('id')})" for p in root.iter(f"{SVG}pattern")
               if any(r.get("fill") == fill for r in p.iter(f"{SVG}rect"))}
    out = []
    for path in _drawn(root):
        style = path.get("style", "")
        if f"fill: {fill}" not in style and not any(f"fill: {h}" in style for h in hatched):
            continue
        points = [(float(x), float(y)) for x, y in re.findall(r"([-\d.]+) ([-\d.]+)", path.get("d", ""))]
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        if len(points) == 4:
            out.append((round(max(xs) - min(xs), 3), round(max(ys) - min(ys), 3)))
    return out


def test_the_bench_picture_draws_each_row_against_its_target(tmp_path: Path) -> None:
    rows = checked({"console_start_s": 2.0, "turns_per_second": 800.0, "console_peak_rss_mb_with_secret": 480.0,
                    "write_bytes_per_turn_100": 1000, "write_bytes_per_turn_10000": 1200})
    out = tmp_path / "bench.svg"
    plots.bench(rows, str(out), title="threadkeeper bench")
    texts = _texts(out)
    assert {"console_start_s", "turns_per_second", "console_peak_rss_mb_with_secret",
            "write_bytes_per_turn_10000"} <= set(texts)
    assert "threadkeeper bench: 3 of 4 targets met" in texts
    assert "480  (target ≤ 120)  missed" in texts and "800  (target ≥ 400)" in texts
    met, missed = _bars(out, "#3a9a5b"), _bars(out, "#c0392b")
    assert len(met) == 3 and len(missed) == 1
    # 2 s of ≤ 4 and 400 needed of 800 each use half their target; 1,200 of ≤ 1,500 bytes four fifths;
    # 480 MB of ≤ 120 is drawn at the edge (twice the target) with its value beside it
    start, turns, write = (w for w, _ in met)
    assert start == pytest.approx(turns) and write == pytest.approx(start * 1.6, rel=1e-3)
    assert missed[0][0] == pytest.approx(start * 4, rel=1e-3)


def _benchmark_row(strategy: str, window: int, standing: float, asked: float, baselines: float) -> dict[str, object]:
    return {"strategy": strategy, "window": window,
            "standing": {"content": standing, "keep_newest": baselines},
            "asked": {"content": asked, "bm25": baselines, "recent_bm25": baselines, "bm25_neighbours": baselines,
                      "keep_newest": baselines}}


def test_the_continuity_picture_puts_threadkeeper_beside_each_strategy_and_baseline(tmp_path: Path) -> None:
    rows = [_benchmark_row("recency", 4000, 0.1, 0.3, 0.2), _benchmark_row("recency", 8000, 0.2, 0.4, 0.2),
            _benchmark_row("threadkeeper", 4000, 0.4, 0.6, 0.2), _benchmark_row("threadkeeper", 8000, 0.8, 0.9, 0.3)]
    out = tmp_path / "continuity.svg"
    plots.continuity(rows, str(out), title="continuity on beam")
    texts = _texts(out)
    for label in ("threadkeeper", "recency", "keep-newest (at threadkeeper's spend)",
                  "BM25 pick (at threadkeeper's spend)", "recent + BM25 (at threadkeeper's spend)",
                  "BM25 ±1 (at threadkeeper's spend)", "4,000", "8,000", "continuity on beam"):
        assert label in texts, label
    assert _texts(out, plots._OURS) == ["40%", "80%", "60%", "90%"], \
        "threadkeeper's shares are written on its bars, standing then asked"
    ours = [h for _, h in _bars(out, plots._OURS)]
    assert len(ours) == 4 and ours[1] == pytest.approx(2 * ours[0], rel=1e-3)
    assert ours[3] == pytest.approx(1.5 * ours[2], rel=1e-3)
    baselines = sum(len(_bars(out, colour)) for colour, _ in plots._BASELINES.values())
    assert baselines == 2 * (1 + 4), "keep-newest standing, four baselines asked, at each window"


def test_the_memory_picture_puts_memory_beside_bm25_and_no_memory(tmp_path: Path) -> None:
    rows = [{"window": 8192, "memory": 0.6, "in_records": 0.9, "bm25": 0.3, "bm25_neighbours": 0.45, "no_memory": 0.0}]
    out = tmp_path / "memory.svg"
    plots.memory(rows, str(out), title="memory across conversations on realtalk")
    texts = _texts(out)
    assert {"threadkeeper memory", "BM25 pick over the other threads (same spend)", "BM25 ±1 (same spend)",
            "no memory", "answer in some stored record (ceiling)", "8,192"} <= set(texts)
    assert _texts(out, plots._OURS) == ["60%"]
    [(_, ours)] = _bars(out, plots._OURS)
    [(_, bm25)] = _bars(out, plots._BASELINES["BM25 pick"][0])
    assert ours == pytest.approx(2 * bm25, rel=1e-3)


@pytest.mark.parametrize("argv", [["eval", "continuity", "--threads", "1", "--messages", "100"],
                                  ["eval", "memory", "--benchmark", "realtalk", "--path",
                                   str(Path(__file__).parent / "data" / "realtalk")],
                                  ["bench", "--quick"]])
@pytest.mark.parametrize("name, says", [("plot.txt", "name a .png, .svg or .pdf file"),
                                        ("no-such-folder/plot.png", "there is no folder")])
def test_a_plot_that_could_not_be_written_is_refused_before_the_run(tmp_path: Path, capsys, argv: list[str],
                                                                    name: str, says: str) -> None:
    target = tmp_path / name
    assert main([*argv, "--plot", str(target)]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1 and not target.exists()


def test_a_plot_without_matplotlib_is_refused_before_the_bench(tmp_path: Path, monkeypatch, capsys) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    assert main(["bench", "--quick", "--plot", str(tmp_path / "bench.png")]) == 2
    assert "--plot needs matplotlib" in capsys.readouterr().err


def test_every_metric_with_a_target_is_one_row_of_the_picture() -> None:
    metrics = {"console_start_s": 1.0, "cli_help_s": 0.4, "unrelated_ms": 3.0}
    assert [t.metric for t in checked(metrics)] == ["cli_help_s", "console_start_s"]
    assert Target("x", 0, "<=", 0, "≤ 0").met and not Target("x", 1, "<=", 0, "≤ 0").met
