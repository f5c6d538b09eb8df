#!/usr/bin/env python3
"""Draws the filter-update benchmarks (`tapstream bench updates` and
bench/python_updates.py JSON) as an SVG chart, with no plotting library:
paths whose taps are replaced at every block with p99.9 under half the
period, as horizontal bars with the issue's target (1024 paths of 8192 taps at
128-frame blocks) as a line. Each --bar is LABEL=FILE:ENGINE[:FORM]: the
result of ENGINE (and FORM, for the Python benchmark) at --frames x --taps in
FILE. Prints each bar's figure too.

  bench/plot_updates.py --svg docs/updates.svg --title "..." \\
      --bar "engine, device arrays=bench/results/updates-....json:cuda-device" \\
      --bar "Python, CuPy rows=bench/results/python-updates-....json:cupy:rows"
"""
import argparse
import json
from xml.sax.saxutils import escape


def figure(file, engine, form, frames, taps):
    with open(file) as f:
        data = json.load(f)
    for r in data["results"]:
        if (r["engine"] == engine and r["frames"] == frames and r["taps"] == taps
                and (form is None or r.get("form") == form)):
            return r["paths"], data.get("commit", "")[:7]
    raise SystemExit(f"{file}: no result for {engine} {form or ''} at {frames} x {taps}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bar", action="append", required=True, help="LABEL=FILE:ENGINE[:FORM]")
    parser.add_argument("--frames", type=int, default=128)
    parser.add_argument("--taps", type=int, default=8192)
    parser.add_argument("--target", type=int, default=1024)
    parser.add_argument("--title", default="")
    parser.add_argument("--svg", required=True)
    args = parser.parse_args()

    bars = []
    for spec in args.bar:
        label, _, where = spec.partition("=")
        parts = where.split(":")
        paths, commit = figure(parts[0], parts[1], parts[2] if len(parts) > 2 else None,
                               args.frames, args.taps)
        bars.append((label, paths, commit))
        print(f"{label}: {paths} paths ({commit})")

    left, right, top, row, bottom = 300, 90, 50, 30, 50
    width = 960
    plot = width - left - right
    most = max(max(p for _, p, _ in bars), args.target) * 1.08
    height = top + row * len(bars) + bottom
    x = lambda v: left + plot * v / most  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="13">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2}" y="22" text-anchor="middle" font-size="15">'
           f'{escape(args.title)}</text>']
    step = 500 if most > 2000 else 250
    for v in range(0, int(most) + 1, step):
        out.append(f'<line x1="{x(v):.1f}" y1="{top - 6}" x2="{x(v):.1f}" '
                   f'y2="{top + row * len(bars)}" stroke="#ddd"/>')
        out.append(f'<text x="{x(v):.1f}" y="{top + row * len(bars) + 18}" '
                   f'text-anchor="middle" fill="#555">{v}</text>')
    for i, (label, paths, commit) in enumerate(bars):
        y = top + i * row
        colour = "#bbb" if "before" in label else ("#3b7dd8" if "Python" in label else "#1b4f9c")
        out.append(f'<text x="{left - 8}" y="{y + row / 2 + 4}" text-anchor="end">'
                   f'{escape(label)}</text>')
        out.append(f'<rect x="{left}" y="{y + 5}" width="{max(1.0, x(paths) - left):.1f}" '
                   f'height="{row - 10}" fill="{colour}"/>')
        out.append(f'<text x="{x(paths) + 5:.1f}" y="{y + row / 2 + 4}">{paths}'
                   f'{" (" + commit + ")" if commit else ""}</text>')
    out.append(f'<line x1="{x(args.target):.1f}" y1="{top - 10}" x2="{x(args.target):.1f}" '
               f'y2="{top + row * len(bars)}" stroke="#c0392b" stroke-dasharray="5,4"/>')
    out.append(f'<text x="{x(args.target) + 4:.1f}" y="{top - 12}" fill="#c0392b">'
               f'target {args.target}</text>')
    out.append(f'<text x="{left + plot / 2}" y="{height - 10}" text-anchor="middle" '
               f'fill="#333">paths of {args.taps} taps replaced at every {args.frames}-frame '
               f'block, p99.9 under half the period</text>')
    out.append("</svg>")
    with open(args.svg, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
