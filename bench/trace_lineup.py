#!/usr/bin/env python3
"""Lines up the daemon's late periods with the engine's calls and the
machine's stalls.

  bench/trace_lineup.py TRACE.json [TRACE2.json ...] [--probe PROBE.csv]

TRACE: what `tapstream ctl trace N` printed (several dumps of one run are
merged); PROBE: what `tapstream probe` printed beside the daemon (the same
CLOCK_MONOTONIC). For every late period (an output record with late frames):
when its callback began, its deadline, when the engine thread woke for its
input, began and ended the call, and the probe's gaps that overlap the
period's window (from one period before its callback to its deadline). A late
period is `stall` when such a gap covers at least half of its overrun, else
`swap` when the engine was taking a new matrix in that window, `unstarted`
when the engine began it only after the deadline, else `slow`.
Importable: lineup(traces, gaps) returns the rows and a summary.
"""

import argparse
import csv
import json
import sys


def merge_traces(traces):
    """Rows of each ring as dicts, merged over dumps (keyed by first frame and start)."""
    merged = {"inputs": {}, "outputs": {}, "blocks": {}, "swaps": {}}
    meta = {}
    for trace in traces:
        meta = {k: trace.get(k) for k in ("sample_rate", "block_frames", "latency_mode",
                                          "engine_in_callback")}
        for ring in merged:
            if ring not in trace:
                continue
            fields = trace[ring]["fields"]
            for row in trace[ring]["rows"]:
                record = dict(zip(fields, row))
                key = (record.get("first_frame", record.get("block")), record.get("start_ns"))
                merged[ring][key] = record
    return meta, {ring: sorted(rows.values(), key=lambda r: r["start_ns"])
                  for ring, rows in merged.items()}


def read_probe(path):
    with open(path) as f:
        return [(int(r["start_ns"]), int(float(r["gap_us"]) * 1000)) for r in csv.DictReader(f)]


def lineup(traces, gaps):
    meta, rings = merge_traces(traces)
    rate = meta.get("sample_rate") or 48000
    blocks = rings["blocks"]
    rows = []
    for out in rings["outputs"]:
        if out["late_frames"] <= 0:
            continue
        period_ns = int(1e9 * out["frames"] / rate)
        first = out["first_frame"]
        served = next((b for b in blocks
                       if b["first_frame"] <= first < b["first_frame"] + b["frames"]), None)
        window = (out["start_ns"] - period_ns, out["deadline_ns"])
        overlapping = [(s, g) for s, g in gaps if s < window[1] and s + g > window[0]]
        overrun = max(0, (served["end_ns"] if served else out["taken_ns"]) - out["deadline_ns"])
        stalled = sum(min(s + g, window[1]) - max(s, window[0]) for s, g in overlapping)
        swaps = [s for s in rings["swaps"] if s["start_ns"] < window[1] and s["end_ns"] > window[0]]
        if overlapping and stalled * 2 >= max(overrun, 1):
            cause = "stall"
        elif swaps:
            cause = "swap"
        elif served is None or served["start_ns"] >= out["deadline_ns"]:
            cause = "unstarted"
        else:
            cause = "slow"
        row = {"first_frame": first, "start_ns": out["start_ns"],
               "deadline_us": (out["deadline_ns"] - out["start_ns"]) / 1e3,
               "late_frames": out["late_frames"], "cause": cause,
               "probe_gaps_us": [round(g / 1e3, 1) for _, g in overlapping],
               "swap_us": [round((s["end_ns"] - s["start_ns"]) / 1e3, 1) for s in swaps]}
        if served:
            row.update({"engine_woke_us": (served["woke_ns"] - out["start_ns"]) / 1e3,
                        "engine_start_us": (served["start_ns"] - out["start_ns"]) / 1e3,
                        "engine_end_us": (served["end_ns"] - out["start_ns"]) / 1e3})
        rows.append(row)
    summary = {"late": len(rows)}
    for cause in ("stall", "swap", "unstarted", "slow"):
        summary[cause] = sum(1 for r in rows if r["cause"] == cause)
    summary["probe_gaps"] = len(gaps)
    summary["periods_traced"] = len(rings["outputs"])
    swap_us = sorted((s["end_ns"] - s["start_ns"]) / 1e3 for s in rings["swaps"])
    if swap_us:
        summary["swaps_traced"] = len(swap_us)
        summary["swap_us_median"] = swap_us[len(swap_us) // 2]
        summary["swap_us_max"] = swap_us[-1]
    return rows, summary


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--probe")
    args = ap.parse_args()
    traces = [json.load(open(p)) for p in args.traces]
    gaps = read_probe(args.probe) if args.probe else []
    rows, summary = lineup(traces, gaps)
    for r in rows:
        print(json.dumps(r))
    print("summary: " + json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
