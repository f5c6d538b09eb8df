#!/usr/bin/env python3
"""Draws the routing-matrix live benchmark (bench/cuda_matrix_bench JSON): p99.9
block time against paths for each engine (CUDA tiled, CUDA cuBLAS, CUDA without
graphs, CPU native, CPU one channel per path), with the 0.3 ms target for 64 x 64
and the half-period budget; an older result can be drawn beside as "before".
Also prints the Markdown table that docs/performance.md carries.

usage: plot_matrix.py RESULT.json [--before OLD.json] [--png OUT.png]
"""
import argparse
import json


def rows_by_engine(data):
    return {live["engine"]: live for live in data["live"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json")
    parser.add_argument("--before", help="an earlier result, drawn dashed")
    parser.add_argument("--png", help="write the chart here (needs matplotlib)")
    args = parser.parse_args()
    with open(args.json) as f:
        data = json.load(f)
    engines = rows_by_engine(data)

    print(f"commit {data['commit'][:7]}, {data.get('gpu', '?')}, {data.get('date', '?')}\n")
    print("| engine | matrix | paths | p50 us | p99 us | p99.9 us |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, live in engines.items():
        for r in live["rows"]:
            print(f"| {name} | {r['inputs']} x {r['outputs']} | {r['paths']} | {r['p50_us']:.0f} "
                  f"| {r['p99_us']:.0f} | {r['p999_us']:.0f} |")
    print()
    for name, live in engines.items():
        print(f"{name}: capacity {live['capacity_paths']} paths "
              f"({live['capacity_side']} x {live['capacity_side']})")

    if not args.png:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for name, live in engines.items():
        rows = live["rows"]
        ax.plot([r["paths"] for r in rows], [r["p999_us"] for r in rows], "o-", label=name)
    if args.before:
        with open(args.before) as f:
            old = json.load(f)
        for name, live in rows_by_engine(old).items():
            if not name.startswith("cuda"):
                continue
            rows = live["rows"]
            ax.plot([r["paths"] for r in rows], [r["p999_us"] for r in rows], "x--",
                    color="gray", label=f"{name}, before ({old['commit'][:7]})")
    budget = 1e6 * 128 / 48000 / 2
    ax.axhline(budget, color="red", lw=0.8)
    ax.text(1.2, budget * 1.05, "half the 128-frame period (1.33 ms)", color="red", fontsize=8)
    ax.plot([4096], [300], "r*", markersize=12, label="target: 64 x 64 at 0.3 ms")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("paths (N x N matrix, 8192 taps each)")
    ax.set_ylabel("p99.9 time per 128-frame block (us)")
    ax.set_title(f"routing matrix, live blocks: {data.get('gpu', '')}, commit {data['commit'][:7]}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.png, dpi=110)
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
