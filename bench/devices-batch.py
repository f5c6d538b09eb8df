#!/usr/bin/env python3
"""One GPU against every GPU of the host on a batch (`process DIR --out-dir`,
issue 23 item 4): the same files through `--devices 0` and `--devices all`,
timed as whole commands (median of --repeats), the outputs compared byte for
byte, and the speedup printed against the target (>= 1.8x on two GPUs for a
compute-bound batch). The files and filter are made here (seeded noise, float
WAV), as bench/file-to-file.py makes them.

    python3 bench/devices-batch.py --tapstream build/daemon/tapstream \\
        [--files 12 --channels 32 --seconds 10 --taps 262144 --repeats 3]
"""

import argparse
import filecmp
import importlib.util
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent


def file_to_file():
    spec = importlib.util.spec_from_file_location("file_to_file", HERE / "file-to-file.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tapstream", required=True)
    parser.add_argument("--work", default="/tmp/devices-batch")
    parser.add_argument("--files", type=int, default=12)
    parser.add_argument("--channels", type=int, default=32)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--taps", type=int, default=262144)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()

    f2f = file_to_file()
    work = pathlib.Path(args.work)
    inputs = work / "in"
    inputs.mkdir(parents=True, exist_ok=True)
    for i in range(args.files):
        path = inputs / f"take{i:02d}.wav"
        if not path.exists():
            f2f.write_float_wav(path, args.channels, args.seconds, 100 + i)
    taps = work / f"taps-{args.taps}.txt"
    if not taps.exists():
        f2f.write_taps(taps, args.taps, 7)

    results = {"files": args.files, "channels": args.channels, "seconds": args.seconds,
               "taps": args.taps, "runs": {}}
    outputs = {}
    for devices in ("0", "all"):
        out = work / f"out-{devices}"
        times = []
        for _ in range(args.repeats):
            shutil.rmtree(out, ignore_errors=True)
            command = [args.tapstream, "process", str(inputs), "--out-dir", str(out), "--taps",
                       str(taps), "--backend", "cuda", "--devices", devices]
            start = time.perf_counter()
            run = subprocess.run(command, stderr=subprocess.PIPE, text=True)
            times.append(time.perf_counter() - start)
            if run.returncode != 0:
                sys.exit(f"{' '.join(command)}: exit {run.returncode}\n{run.stderr}")
        outputs[devices] = out
        results["runs"][devices] = {"median_s": statistics.median(times), "times_s": times,
                                    "gpus_used": sorted({line.rsplit(" on GPU ", 1)[1]
                                                         for line in run.stderr.splitlines()
                                                         if " on GPU " in line})}
        print(f"--devices {devices}: median {statistics.median(times):.3f} s over "
              f"{args.repeats} ({', '.join(f'{t:.3f}' for t in times)})", flush=True)
    names = sorted(os.listdir(outputs["0"]))
    same = names == sorted(os.listdir(outputs["all"])) and all(
        filecmp.cmp(outputs["0"] / n, outputs["all"] / n, shallow=False) for n in names)
    speedup = results["runs"]["0"]["median_s"] / results["runs"]["all"]["median_s"]
    results["same_outputs"] = same
    results["speedup"] = speedup
    gpus = len(results["runs"]["all"]["gpus_used"])
    print(f"outputs identical: {same}; {gpus} GPUs used; speedup {speedup:.2f}x "
          f"(target >= 1.8x on two GPUs: {'met' if speedup >= 1.8 else 'missed'})")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
