#!/usr/bin/env python3
"""What the Python module adds to an engine call (issue 25: at most 5 % of the
engine's per-call time at 8 channels x 65536 taps x 64 frames).

Per call, on one engine and the same block: the time of Engine.process from
Python (new output array each call, and with out=: no allocation) and, inside
that same call, the engine's own time (Engine._last_engine_call_us: its calls
and the session's staging); what the module adds is the difference, call by
call, at the pace Python calls it. Also printed: the engine alone in a tight
C++ loop (Engine._time_engine_calls), which a GPU engine runs faster than
calls with Python's gaps between them (the GPU has less time to idle), so
that the difference of the two loops is not the module's cost. Rounds
alternate so that drift hits every case.
With --backend cuda and CuPy or PyTorch installed, also device arrays
(Engine.process of a CUDA array against MatrixEngine::process_device).

  PYTHONPATH=build/python python3 bench/python_overhead.py [--backend cpu|cuda]
      [--channels 8] [--taps 65536] [--frames 64] [--calls 2000] [--rounds 5] [--json FILE]
"""

import argparse
import json
import sys
import time

import numpy as np

import tapstream


def percentile(values, p):
    return float(np.percentile(np.asarray(values), p))


def python_calls(engine, x, out, calls):
    """Each call's time from Python (engine.process(x), or with out=) and the
    engine's own time inside it."""
    wall, inside = np.empty(calls), np.empty(calls)
    clock = time.perf_counter_ns
    process = engine.process
    if out is None:
        for i in range(calls):
            start = clock()
            process(x)
            wall[i] = (clock() - start) / 1000.0
            inside[i] = engine._last_engine_call_us
    else:
        for i in range(calls):
            start = clock()
            process(x, out=out)
            wall[i] = (clock() - start) / 1000.0
            inside[i] = engine._last_engine_call_us
    return wall, inside


def summary(name, loop_us, wall_us, inside_us):
    wall_us, inside_us = np.asarray(wall_us), np.asarray(inside_us)
    added = wall_us - inside_us
    e50, m50, a50 = percentile(inside_us, 50), percentile(wall_us, 50), percentile(added, 50)
    row = {"case": name, "engine_loop_p50_us": percentile(loop_us, 50), "engine_p50_us": e50,
           "module_p50_us": m50, "added_p50_us": a50, "added_p50_percent": 100.0 * a50 / e50,
           "added_p99_us": percentile(added, 99), "engine_p99_us": percentile(inside_us, 99),
           "module_p99_us": percentile(wall_us, 99)}
    print(f"{name:38s} engine p50 {e50:8.2f} us (tight C++ loop {row['engine_loop_p50_us']:7.2f})"
          f"  via Python {m50:8.2f} us  added p50 {a50:+6.2f} us "
          f"({row['added_p50_percent']:+6.2f} %), p99 {row['added_p99_us']:+6.2f} us", flush=True)
    return row


def device_arrays(engine, x_host, calls, rounds):
    """(name, make a device array, its pointer, the stream pointer) for CuPy and PyTorch."""
    cases = []
    try:
        import cupy
        x = cupy.asarray(x_host)
        out = cupy.empty((engine.outputs, x_host.shape[1]), cupy.float32)
        stream = cupy.cuda.get_current_stream().ptr
        cases.append(("cupy", x, x.data.ptr, (out.data.ptr, out), stream))
    except ImportError:
        print("device arrays: no CuPy", file=sys.stderr)
    try:
        import torch
        if torch.cuda.is_available():
            x = torch.from_numpy(x_host).cuda()
            out = torch.empty((engine.outputs, x_host.shape[1]), device="cuda")
            stream = torch.cuda.current_stream().cuda_stream
            cases.append(("torch", x, x.data_ptr(), (out.data_ptr(), out), stream))
    except ImportError:
        print("device arrays: no PyTorch", file=sys.stderr)
    rows = []
    for name, x, x_ptr, out_ptr, stream in cases:
        out = out_ptr[1]
        loop_us, new, with_out = [], ([], []), ([], [])
        for _ in range(rounds):
            loop_us += list(engine._time_device_calls(x_ptr, out_ptr[0], x_host.shape[1], stream,
                                                      calls))
            for case, out_array in ((new, None), (with_out, out)):
                try:
                    wall, inside = python_calls(engine, x, out_array, calls)
                except TypeError as e:  # a module without out= for device arrays
                    print(f"{name} with out=: {e}", file=sys.stderr)
                    continue
                case[0].extend(wall)
                case[1].extend(inside)
        rows.append(summary(f"{name} array -> new {name} array", loop_us, *new))
        if with_out[0]:
            rows.append(summary(f"{name} array -> out= {name} array", loop_us, *with_out))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="cpu", choices=["cpu", "cuda", "auto"])
    parser.add_argument("--channels", type=int, default=8)
    parser.add_argument("--taps", type=int, default=65536)
    parser.add_argument("--frames", type=int, default=64)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    filters = (rng.standard_normal((args.channels, args.taps)) * 0.01).astype(np.float32)
    x = rng.standard_normal((args.channels, args.frames)).astype(np.float32)
    engine = tapstream.Engine(filters, backend=args.backend, max_block=args.frames)
    print(f"{engine.description}; {args.channels} ch x {args.taps} taps x {args.frames} frames, "
          f"{args.rounds} rounds of {args.calls} calls, seed {args.seed}", flush=True)
    out = np.empty((engine.outputs, args.frames), np.float32)
    for _ in range(200):  # warm: plans, caches, the CUDA engine's graphs
        engine.process(x)

    loop_us, new, with_out = [], ([], []), ([], [])
    for _ in range(args.rounds):
        loop_us += list(engine._time_engine_calls(x, args.calls))
        for case, out_array in ((new, None), (with_out, out)):
            wall, inside = python_calls(engine, x, out_array, args.calls)
            case[0].extend(wall)
            case[1].extend(inside)
    rows = [summary("numpy -> new numpy array", loop_us, *new),
            summary("numpy -> out= (no allocation)", loop_us, *with_out)]
    if engine.backend == "cuda":
        rows += device_arrays(engine, x, args.calls, args.rounds)
    # The target: the module adds at most 5 % to the engine's call (p50).
    for row in rows:
        verdict = "met" if row["added_p50_percent"] <= 5.0 else "missed"
        print(f"target <= 5 % added: {row['case']}: {row['added_p50_percent']:+.2f} %: {verdict}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"engine": engine.description, "channels": args.channels,
                       "taps": args.taps, "frames": args.frames, "calls": args.calls,
                       "rounds": args.rounds, "results": rows}, f, indent=2)


if __name__ == "__main__":
    main()
