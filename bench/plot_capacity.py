#!/usr/bin/env python3
"""Draws capacity against block size from capacity benchmark JSON
(bench/capacity_bench or `tapstream bench capacity --json`): one line per
engine and filter length, channels on a log scale. Also prints the Markdown
table that docs/performance.md carries.

usage: plot_capacity.py RESULT.json [--png OUT.png]
"""
import argparse
import json
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json")
    parser.add_argument("--png", help="write the chart here (needs matplotlib)")
    args = parser.parse_args()
    with open(args.json) as f:
        data = json.load(f)

    lines = {}
    for r in data["results"]:
        lines.setdefault((r["engine"], r["taps"]), []).append(r)

    print(f"capacity at p99.9 < half the block period, {data['rate']:g} Hz; "
          f"commit {data['commit']}, GPU {data['gpu']}, {data['date']}\n")
    print("| engine | taps | block | channels | p50 us | p99 us | p99.9 us | budget us |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for (engine, taps), rows in sorted(lines.items()):
        for r in sorted(rows, key=lambda r: r["frames"]):
            channels = f"{r['channels']}{'+' if r['capped'] else ''}"
            print(f"| {engine} | {taps} | {r['frames']} | {channels} | {r['p50_us']:.1f} | "
                  f"{r['p99_us']:.1f} | {r['p999_us']:.1f} | {r['budget_us']:.1f} |")

    if not args.png:
        return 0
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (engine, taps), rows in sorted(lines.items()):
        rows = sorted(rows, key=lambda r: r["frames"])
        ax.plot([r["frames"] for r in rows], [max(r["channels"], 0.8) for r in rows],
                marker="o" if engine == "cuda" else "s",
                linestyle="-" if engine == "cuda" else "--",
                label=f"{engine}, {taps} taps")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("block size (frames)")
    ax.set_ylabel("channels with p99.9 < half the block period")
    ax.set_title(f"Capacity, {data['gpu']} ({data['commit'][:7]})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.png, dpi=120)
    print(f"\nwrote {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
