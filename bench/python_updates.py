#!/usr/bin/env python3
"""`tapstream bench updates` from Python (issue 25): how many paths' filters a
Python loop replaces at every block while its calls stay live.

A routing matrix of S sources x O outputs (every pair a path of T taps:
binaural rendering's shape with O = 2) runs one Engine.process per block
period, paced as a live device delivers blocks (a busy wait to each period's
start); every k blocks every path's filter is replaced with Engine.set_paths
(crossfaded over the call that follows), alternating between two distinct
sets so that each update changes every path. A call's time is the update's
(when one is due) plus the block's, as a Python user's loop pays them:
p50 / p99 / p99.9. For each case the search doubles S while the p99.9 stays
under half the period, bisects, and confirms the largest count with a longer
run. Cases (--engines):
  cupy, torch: the CUDA engine, blocks and new filters as CuPy arrays or PyTorch
          tensors on the GPU (a room simulator or HRTF interpolator there);
  host:   the CUDA engine, blocks and filters as NumPy arrays;
  cpu:    the CPU engine, NumPy.
--form dict: set_paths({(i, o): taps, ...}), an array per path, as the
README shows; --form rows: set_paths(taps, pairs=[(i, o), ...]), one 2-D
array whose rows are the paths' taps (a batch from a simulator).
The block is passed with out= (a preallocated output), as a warm loop does
(a module that takes out= for NumPy blocks only returns a new array instead).

  PYTHONPATH=build/python python3 bench/python_updates.py --engines cupy torch host cpu \\
      --blocks 128 --taps 8192 [--every 1] [--outputs 2] [--form dict rows] [--json FILE]
"""
import argparse
import json
import sys
import time

import numpy as np

import tapstream


def percentiles(values):
    v = np.asarray(values)
    if v.size == 0:
        return {"p50": 0.0, "p99": 0.0, "p999": 0.0, "max": 0.0}
    return {"p50": float(np.percentile(v, 50)), "p99": float(np.percentile(v, 99)),
            "p999": float(np.percentile(v, 99.9)), "max": float(v.max())}


class Library:
    """Arrays of one kind: NumPy, CuPy or PyTorch (on the GPU)."""

    def __init__(self, case):
        self.case = case
        if case == "cupy":
            import cupy
            self.lib = cupy
        elif case == "torch":
            import torch
            if not torch.cuda.is_available():
                raise RuntimeError("PyTorch sees no GPU")
            self.lib = torch
        else:
            self.lib = None

    def array(self, a):
        if self.case == "cupy":
            return self.lib.asarray(a)
        if self.case == "torch":
            return self.lib.from_numpy(a).cuda()
        return a

    def synchronize(self):
        if self.case == "cupy":
            self.lib.cuda.get_current_stream().synchronize()
        elif self.case == "torch":
            self.lib.cuda.synchronize()


def probe(args, case, form, sources, frames, taps, blocks, budget_us, rng):
    outputs = args.outputs
    lib = Library(case)
    pairs = [(i, o) for i in range(sources) for o in range(outputs)]
    first = (rng.standard_normal((len(pairs), taps)) * 0.01).astype(np.float32)
    matrix = tapstream.Matrix(sources, outputs, [(i, o, first[k]) for k, (i, o) in
                                                 enumerate(pairs)])
    backend = "cpu" if case == "cpu" else "cuda"
    engine = tapstream.Engine(matrix, backend=backend, max_block=frames, max_taps=taps)
    # Two distinct sets, made before the loop (what the loop hands over, not how it is made).
    sets = []
    for _ in range(2):
        rows = lib.array((rng.standard_normal((len(pairs), taps)) * 0.01).astype(np.float32))
        if form == "rows":
            sets.append(rows)
        else:
            sets.append({pair: rows[k] for k, pair in enumerate(pairs)})
    x = lib.array(rng.standard_normal((sources, frames)).astype(np.float32))
    out = lib.array(np.zeros((outputs, frames), np.float32))
    lib.synchronize()
    warm = max(50, blocks // 10)
    period = int(2 * budget_us * 1000)  # ns
    clock = time.perf_counter_ns
    calls, updates = [], []
    which = 0
    set_paths, process = engine.set_paths, engine.process
    try:
        process(x, out=out)
        call_with_out = True
    except TypeError:  # a module that takes out= for NumPy blocks only
        call_with_out = False
    next_start = clock()
    for i in range(warm + blocks):
        while clock() < next_start:
            pass
        next_start = max(next_start + period, clock())  # late: no catching up
        t0 = clock()
        update = i % args.every == 0
        if update:
            if form == "rows":
                set_paths(sets[which], pairs=pairs)
            else:
                set_paths(sets[which])
            which ^= 1
        t1 = clock()
        if call_with_out:
            process(x, out=out)
        else:
            process(x)
        t2 = clock()
        if i >= warm:
            calls.append((t2 - t0) / 1000.0)
            if update:
                updates.append((t1 - t0) / 1000.0)
    result = {"paths": len(pairs), "us": percentiles(calls), "update_us": percentiles(updates),
              "description": engine.description}
    result["fits"] = result["us"]["p999"] < budget_us
    return result


def search(args, case, form, frames, taps):
    budget_us = 0.5 * frames / args.rate * 1e6
    rng = np.random.default_rng(args.seed)
    tried = []

    def fits(sources, blocks):
        try:
            p = probe(args, case, form, sources, frames, taps, blocks, budget_us, rng)
        except (MemoryError, RuntimeError) as e:
            p = {"paths": sources * args.outputs, "fits": False, "us": percentiles([]),
                 "update_us": percentiles([]), "description": f"failed: {e}"}
        tried.append(p)
        u, w = p["us"], p["update_us"]
        print(f"  {case:6s} {form:5s} {frames:5d} frames {taps:6d} taps {p['paths']:6d} paths: "
              f"p50 {u['p50']:8.1f} p99 {u['p99']:8.1f} p99.9 {u['p999']:8.1f} us "
              f"(update p50 {w['p50']:.1f} p99.9 {w['p999']:.1f}) "
              f"{'fits' if p['fits'] else 'over'}"
              + (f" {p['description']}" if p["description"].startswith("failed") else ""),
              flush=True)
        return p

    most = max(1, args.max_paths // args.outputs)
    good, bad = 0, None
    s = 1
    while s <= most:
        if fits(s, args.probe_blocks)["fits"]:
            good, s = s, s * 2
        else:
            bad = s
            break
    if bad is None:
        bad = min(most + 1, s)
    while bad - good > max(1, good // 16):
        mid = (good + bad) // 2
        if fits(mid, args.probe_blocks)["fits"]:
            good = mid
        else:
            bad = mid
    best = None
    while good > 0:
        p = fits(good, args.measure_blocks)
        if p["fits"]:
            best = p
            break
        good = good * 9 // 10
    return {"engine": case, "form": form, "frames": frames, "taps": taps,
            "budget_us": budget_us, "paths": best["paths"] if best else 0,
            "path_updates_per_second": (best["paths"] / (frames / args.rate * args.every)
                                        if best else 0.0),
            "best": best, "search": [(p["paths"], p["us"]["p50"], p["us"]["p99"],
                                      p["us"]["p999"]) for p in tried]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", nargs="+", default=["cupy", "torch", "host", "cpu"],
                        choices=["cupy", "torch", "host", "cpu"])
    parser.add_argument("--form", nargs="+", default=["dict"], choices=["dict", "rows"])
    parser.add_argument("--blocks", nargs="+", type=int, default=[128])
    parser.add_argument("--taps", nargs="+", type=int, default=[8192])
    parser.add_argument("--every", type=int, default=1)
    parser.add_argument("--outputs", type=int, default=2)
    parser.add_argument("--rate", type=float, default=48000.0)
    parser.add_argument("--probe-blocks", type=int, default=200)
    parser.add_argument("--measure-blocks", type=int, default=2000)
    parser.add_argument("--max-paths", type=int, default=16384)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--commit", default="")
    parser.add_argument("--json")
    args = parser.parse_args()
    print(f"seed {args.seed}; every {args.every} blocks; {args.outputs} outputs; "
          f"Python {sys.version.split()[0]}", flush=True)
    cells = []
    for case in args.engines:
        try:
            Library(case)
        except (ImportError, RuntimeError) as e:
            print(f"{case}: skipped ({e})", flush=True)
            continue
        for form in args.form:
            for frames in args.blocks:
                for taps in args.taps:
                    cell = search(args, case, form, frames, taps)
                    cells.append(cell)
                    b = cell["best"]
                    print(f"{case} {form}: {frames} frames, {taps} taps: {cell['paths']} paths "
                          f"replaced every {args.every} block(s) "
                          f"({cell['path_updates_per_second']:.0f} path updates/s)"
                          + (f", p50 / p99 / p99.9 {b['us']['p50']:.1f} / {b['us']['p99']:.1f}"
                             f" / {b['us']['p999']:.1f} us of {cell['budget_us']:.1f}"
                             if b else ""), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "python updates", "commit": args.commit,
                       "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "every": args.every, "outputs": args.outputs, "rate": args.rate,
                       "seed": args.seed, "python": sys.version.split()[0],
                       "results": cells}, f, indent=2)


if __name__ == "__main__":
    main()
