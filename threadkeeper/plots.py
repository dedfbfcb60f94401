"""Pictures of the evals' and the bench's results (``--plot FILE``), drawn with matplotlib, the ``plot`` extra.

The file's suffix picks the format: ``.png``, ``.svg`` (its text stays text) or ``.pdf``. Each picture puts
Threadkeeper's figure first, in one strong colour with its value written on it, beside what it is compared with.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .settings import SettingsError

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from .bench import Target

FORMATS = ("png", "svg", "pdf")
PROJECT = "threadkeeper"
_OURS = "#1f5fbf"
_STRATEGIES = ("#e08a1e", "#3a9a5b", "#8a5cc2", "#b5475b")
_BASELINES = {"keep-newest": ("#c8c8c8", ".."), "BM25 pick": ("#9a9a9a", "//"), "recent + BM25": ("#b4b4b4", "\\\\"),
              "BM25 ±1": ("#6e6e6e", "xx"), "no memory": ("#e2e2e2", "--")}
"""Each baseline in grey, told apart by its hatching, the same in every picture."""

Series = tuple[str, Sequence[float], str, str | None]
"""One series of bars: its label, its share per window, its colour and its hatching (None for none)."""


def check_plot(path: str | None) -> None:
    """Refuse a ``--plot`` that could not be written, before the run it would draw (minutes of work)."""
    if path is None:
        return
    if importlib.util.find_spec("matplotlib") is None:
        raise SettingsError("--plot needs matplotlib, which is not installed: pip install 'threadkeeper-slack[plot]' "
                            "(make install includes it), or leave out --plot")
    target = Path(path)
    if target.suffix.lower().lstrip(".") not in FORMATS:
        raise SettingsError(f"--plot {path}: name a .png, .svg or .pdf file (its suffix picks the format)")
    if not target.resolve().parent.is_dir():
        raise SettingsError(f"--plot {path}: there is no folder {target.resolve().parent} to write it in")


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    # an SVG's text as text (readable, searchable, smaller); the same file from the same figures
    matplotlib.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": PROJECT})
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Figure, out: str, *, below: float = 0) -> None:
    """Writes the figure (leaving ``below``, a share of its height, for a legend there) in the suffix's format."""
    fig.tight_layout(rect=(0, below, 1, 1))
    dated = out.lower().endswith((".svg", ".pdf"))  # (without a date, the same figures give the same file)
    fig.savefig(out, dpi=120, bbox_inches="tight", metadata={"Date": None} if dated else None)


def _share(value: Any) -> float:
    return float("nan") if value is None else float(value)


def _baseline(name: str, label: str, values: Sequence[float]) -> Series:
    colour, hatch = _BASELINES[name]
    return label, values, colour, hatch


def _grouped(ax: Axes, windows: Sequence[int], series: Sequence[Series], *, ylabel: str, title: str) -> None:
    """Bars grouped by context window, one per series; the first series is Threadkeeper's and has its values
    written on it."""
    width = 0.84 / len(series)
    for i, (label, values, colour, hatch) in enumerate(series):
        xs = [w + (i - (len(series) - 1) / 2) * width for w in range(len(windows))]
        # (a hatching is drawn in the edge colour; the edge itself is not drawn)
        bars = ax.bar(xs, values, width, label=label, color=colour, hatch=hatch, edgecolor="#4a4a4a", linewidth=0)
        if i == 0:
            ax.bar_label(bars, labels=[f"{v:.0%}" if v == v else "" for v in values], fontsize=8, padding=2,
                         color=_OURS, fontweight="bold")
    ax.set_xticks(range(len(windows)), [f"{w:,}" for w in windows])
    ax.set_xlabel("context window (tokens)")
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 1.08)
    ax.yaxis.set_major_formatter(lambda v, _: f"{v:.0%}")
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.set_title(title, fontsize=10)


def _strategies(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The strategies run, Threadkeeper's first."""
    names = list(dict.fromkeys(r["strategy"] for r in rows))
    return sorted(names, key=lambda s: s != PROJECT)


def continuity(rows: Sequence[dict[str, Any]], out: str, *, title: str) -> None:
    """``eval continuity``: the share kept per window for each strategy, Threadkeeper's beside each other strategy and
    (on a public benchmark) each retrieval baseline at Threadkeeper's spend; the standing context and, when the
    questions were asked, the context built for each question, side by side."""
    plt = _pyplot()
    windows = sorted({r["window"] for r in rows})
    at = {(r["strategy"], r["window"]): r for r in rows}
    names = _strategies(rows)
    benchmark = any("standing" in r for r in rows)
    reference = names[0]  # the baselines are at this strategy's spend

    def per_window(strategy: str, value: Callable[[dict[str, Any]], Any]) -> list[float]:
        return [_share(value(at[(strategy, w)])) if (strategy, w) in at else float("nan") for w in windows]

    def strategy_series(value: Callable[[dict[str, Any]], Any]) -> list[Series]:
        others = iter(_STRATEGIES * len(names))
        return [(name, per_window(name, value), _OURS if name == PROJECT else next(others), None) for name in names]

    panels: list[tuple[str, list[Series]]] = []
    if benchmark:
        standing = strategy_series(lambda r: r["standing"]["content"])
        standing.append(_baseline("keep-newest", f"keep-newest (at {reference}'s spend)",
                                  per_window(reference, lambda r: r["standing"]["keep_newest"])))
        panels.append(("standing context, before any question", standing))
    else:
        panels.append(("standing context, before any question", strategy_series(lambda r: r["retention"]["overall"])))
    if any("asked" in r for r in rows):
        if benchmark:
            asked = strategy_series(lambda r: r.get("asked", {}).get("content"))
            for key, name in (("bm25", "BM25 pick"), ("recent_bm25", "recent + BM25"),
                              ("bm25_neighbours", "BM25 ±1"), ("keep_newest", "keep-newest")):
                asked.append(_baseline(name, f"{name} (at {reference}'s spend)",
                                       per_window(reference, lambda r: r.get("asked", {}).get(key))))
        else:
            asked = strategy_series(lambda r: r.get("asked", {}).get("retention", {}).get("overall"))
        panels.append(("each question asked as the next message, recall included", asked))
    ylabel = "questions whose answer the context holds" if benchmark else "planted probes kept"
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 4.6), squeeze=False)
    for ax, (subtitle, series) in zip(axes[0], panels, strict=True):
        _grouped(ax, windows, series, ylabel=ylabel, title=subtitle)
    handles: dict[str, Any] = {}
    for ax in axes[0]:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    fig.suptitle(title, fontsize=11)
    fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=min(4, len(handles)), fontsize=8,
               frameon=False)
    _save(fig, out, below=0.06 + 0.04 * ((len(handles) - 1) // 4))
    plt.close(fig)


def memory(rows: Sequence[dict[str, Any]], out: str, *, title: str) -> None:
    """``eval memory``: the share of questions whose answer a new thread's memory brings, per window, beside BM25
    over the other threads and no memory at the same spend; a line marks the share some stored record holds."""
    plt = _pyplot()
    windows = [r["window"] for r in rows]
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    series: list[Series] = [
        ("threadkeeper memory", [_share(r["memory"]) for r in rows], _OURS, None),
        _baseline("BM25 pick", "BM25 pick over the other threads (same spend)", [_share(r["bm25"]) for r in rows]),
        _baseline("BM25 ±1", "BM25 ±1 (same spend)", [_share(r["bm25_neighbours"]) for r in rows]),
        _baseline("no memory", "no memory", [_share(r["no_memory"]) for r in rows])]
    _grouped(ax, windows, series, ylabel="questions whose answer the new thread holds", title=title)
    ax.hlines([_share(r["in_records"]) for r in rows], [i - 0.45 for i in range(len(rows))],
              [i + 0.45 for i in range(len(rows))], colors="black", linestyles="dotted",
              label="answer in some stored record (ceiling)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    _save(fig, out)
    plt.close(fig)


_CLIP = 2.0
"""How far past its target a bar is drawn; its value is written beside it."""


def bench(rows: Sequence[Target], out: str, *, title: str) -> None:
    """``bench``: each metric that has a target as a bar of how much of the target it uses (the value over the bound
    for "at most", the bound over the value for "at least"), so 1 is the target for every row; met rows green,
    missed red, each labelled with its value and target."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 0.32 * len(rows) + 1.4))

    def used(t: Target) -> float:
        if t.op == "<=":
            return t.value / t.bound if t.bound > 0 else (0.0 if t.value <= t.bound else _CLIP)
        return t.bound / t.value if t.value > 0 else _CLIP

    shares = [min(used(t), _CLIP) for t in rows]
    ys = list(range(len(rows)))[::-1]
    ax.barh(ys, shares, color=["#3a9a5b" if t.met else "#c0392b" for t in rows], height=0.7)
    for y, share, t in zip(ys, shares, rows, strict=True):
        ax.text(share + 0.02, y, f"{t.value:,g}  (target {t.shown})" + ("" if t.met else "  missed"),
                va="center", fontsize=7.5, color="black" if t.met else "#c0392b")
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_yticks(ys, [t.metric for t in rows], fontsize=7.5)
    ax.set_xlim(0, _CLIP + 1.1)
    ax.set_xticks([0, 0.5, 1, 1.5, 2], ["0", "½", "target", "1½×", "≥ 2×"])
    ax.set_xlabel("share of the target used (value ÷ bound for ≤, bound ÷ value for ≥): past the line misses it")
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    met = sum(t.met for t in rows)
    ax.set_title(f"{title}: {met} of {len(rows)} targets met", fontsize=10)
    _save(fig, out)
    plt.close(fig)
