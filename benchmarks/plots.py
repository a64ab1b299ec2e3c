"""Plots for docs/performance.md: the success path against the peers, as SVG bar charts.

Runs `classic.run_all` (the same interleaved measurement as `benchmarks/classic.py`) and writes
`docs/img/success-path-sync.svg` and `docs/img/success-path-async.svg`. No plotting library:
the charts are a few lines of SVG, so the docs build needs nothing more.

    .venv/bin/python benchmarks/plots.py --loops 20000 --runs 7
"""

from __future__ import annotations

import argparse
import html
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from classic import run_all

OUT = Path(__file__).parent.parent / "docs" / "img"
OURS = "#3f51b5"
PEER = "#9e9e9e"


def bar_chart(title: str, rows: list[tuple[str, float, bool]]) -> str:
    """Horizontal bars, one per (label, microseconds, ours?)."""
    width, label_width, bar_height, gap = 760, 300, 22, 8
    top = 40
    height = top + len(rows) * (bar_height + gap) + 20
    longest = max(value for _, value, _ in rows)
    scale = (width - label_width - 90) / longest
    parts = [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="13">'
        ),
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="10" y="24" font-size="15" font-weight="bold">{html.escape(title)}</text>',
    ]
    for index, (label, value, ours) in enumerate(rows):
        y = top + index * (bar_height + gap)
        length = max(value * scale, 1.0)
        parts.append(
            f'<text x="{label_width - 8}" y="{y + 15}" text-anchor="end">{html.escape(label)}</text>'
            f'<rect x="{label_width}" y="{y}" width="{length:.1f}" height="{bar_height}" '
            f'fill="{OURS if ours else PEER}"/>'
            f'<text x="{label_width + length + 6:.1f}" y="{y + 15}">{value:.2f} µs</text>'
        )
    parts.append("</svg>\n")
    return "\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    samples = run_all(args.loops, args.runs)
    medians = {name: statistics.median(values) * 1e6 for name, values in samples.items()}
    OUT.mkdir(parents=True, exist_ok=True)
    for mode, title in (
        ("sync", "Sync success path, µs per call (lower is better)"),
        ("async", "Async success path, µs per call (lower is better)"),
    ):
        rows = [
            (name.removeprefix(f"{mode} "), value, "resilience" in name)
            for name, value in sorted(medians.items(), key=lambda item: item[1])
            if name.startswith(f"{mode} ") and "plain" not in name
        ]
        path = OUT / f"success-path-{mode}.svg"
        path.write_text(bar_chart(title, rows), encoding="utf-8")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
