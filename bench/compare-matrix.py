#!/usr/bin/env python3
"""A routing matrix file to file, tapstream against BruteFIR (issue 11's CPU
target: tapstream >= 2x BruteFIR on the same 2 -> 4 crossover job).

The job: SECONDS (60) of stereo 48 kHz float32 white noise through a matrix
file (default config/matrix/crossover-2way.toml: 2 -> 4, four 1023-tap
Linkwitz-Riley paths), file in and file out:

  tapstream process IN.wav OUT.wav --matrix FILE.toml --backend cpu
  brutefir with the same paths (each path's delay, gain and polarity folded
      into its coefficients, so both do the same filtering), raw float32 in
      and out, at several partition sizes; the fastest is reported

Each figure is the median of RUNS (5) runs after one warm-up (which also lets
each tool cache its FFTW plans); wall time, the figure compared, and CPU time
(user + sys of the process and the children it waited for: BruteFIR's
filter processes outlive its main one, so its CPU time is undercounted and no
CPU ratio is given). tapstream's
output is checked against BruteFIR's (relative error over the whole file). JSON with commit, machine and date.

usage: bench/compare-matrix.py [--tapstream build/daemon/tapstream]
           [--matrix FILE.toml] [--runs 5] [--seconds 60] [--out FILE.json]
"""

import argparse
import array
import datetime
import json
import math
import os
import platform
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RATE = 48000


def read_taps(path):
    """Taps of a text coefficient file (one per line, '#' comments)."""
    taps = []
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                taps.append(float(line))
    return taps


def effective_paths(matrix_file):
    """(inputs, outputs, [(input, output, taps)]) with delay, gain and
    polarity folded into the taps, as tapstream's engines run them."""
    with open(matrix_file, "rb") as f:
        m = tomllib.load(f)
    if "path" not in m:
        sys.exit("compare-matrix: only [[path]] matrices with text coefficient files")
    base = os.path.dirname(os.path.abspath(matrix_file))
    paths = []
    for p in m["path"]:
        taps = read_taps(os.path.join(base, p["file"]))
        scale = 10.0 ** (p.get("gain_db", 0.0) / 20.0) * (-1.0 if p.get("invert", False) else 1.0)
        taps = [0.0] * p.get("delay_frames", 0) + [t * scale for t in taps]
        paths.append((p["input"], p["output"], taps))
    return m["inputs"], m["outputs"], paths


def run_timed(argv):
    """(wall_s, cpu_s) of one run; exits on failure."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.exit(f"compare-matrix: {' '.join(argv)} failed ({code}):\n{err}")
    return wall, usage.ru_utime + usage.ru_stime


def median_of(argv, runs):
    run_timed(argv)  # warm-up
    walls, cpus = zip(*(run_timed(argv) for _ in range(runs)))
    return {"wall_s": round(statistics.median(walls), 4), "cpu_s": round(statistics.median(cpus), 4),
            "wall_min_s": round(min(walls), 4), "wall_max_s": round(max(walls), 4)}


def brutefir_config(work, inputs, outputs, paths, partition, source, destination):
    blocks = max(math.ceil(len(t) / partition) for _, _, t in paths)
    lines = [
        "float_bits: 32;", f"sampling_rate: {RATE};", f"filter_length: {partition},{blocks};",
        "overflow_warnings: false;", "show_progress: false;", "lock_memory: false;",
        'modules_path: "/usr/lib/brutefir";', f'convolver_config: "{work}/brutefir-wisdom";',
    ]
    for k, (_, _, taps) in enumerate(paths):
        coeff = f"{work}/coeff{k}.f32"
        with open(coeff, "wb") as f:
            array.array("f", taps).tofile(f)
        lines.append(f'coeff {k} {{ filename: "{coeff}"; format: "FLOAT_LE"; }};')
    names_in = ", ".join(f'"i{i}"' for i in range(inputs))
    names_out = ", ".join(f'"o{o}"' for o in range(outputs))
    lines.append(f'input {names_in} {{ device: "file" {{ path: "{source}"; }}; '
                 f'sample: "FLOAT_LE"; channels: {inputs}; }};')
    lines.append(f'output {names_out} {{ device: "file" {{ path: "{destination}"; }}; '
                 f'sample: "FLOAT_LE"; channels: {outputs}; }};')
    for k, (i, o, _) in enumerate(paths):
        lines.append(f'filter "f{k}" {{ from_inputs: "i{i}"; to_outputs: "o{o}"; coeff: {k}; }};')
    cfg = f"{work}/brutefir-{partition}.conf"
    with open(cfg, "w") as f:
        f.write("\n".join(lines) + "\n")
    return cfg


def wav_float_samples(path):
    with open(path, "rb") as f:
        data = f.read()
    pos = 12
    while pos + 8 <= len(data):
        tag, size = data[pos:pos + 4], struct.unpack("<I", data[pos + 4:pos + 8])[0]
        if tag == b"data":
            a = array.array("f")
            a.frombytes(data[pos + 8:pos + 8 + size])
            return a
        pos += 8 + size + (size & 1)
    sys.exit(f"compare-matrix: {path}: no data chunk")


def relative_error(ours, theirs):
    """max |ours - theirs| / max |theirs| over the samples both have (file to
    file, BruteFIR's output is aligned with its input: no partition delay)."""
    n = min(len(ours), len(theirs))
    peak = max(abs(x) for x in theirs[:n]) or 1.0
    return max(abs(a - b) for a, b in zip(ours[:n], theirs[:n])) / peak


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tapstream", default=os.path.join(ROOT, "build/daemon/tapstream"))
    parser.add_argument("--matrix", default=os.path.join(ROOT, "config/matrix/crossover-2way.toml"))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--partitions", default="256,1024,4096,16384")
    parser.add_argument("--out")
    args = parser.parse_args()
    for tool in ("sox", "brutefir"):
        if shutil.which(tool) is None:
            sys.exit(f"compare-matrix: {tool} not found (tools/install-deps.sh installs it)")

    inputs, outputs, paths = effective_paths(args.matrix)
    with tempfile.TemporaryDirectory(prefix="compare-matrix-") as work:
        env_wisdom = os.path.join(work, "tapstream-wisdom")
        os.environ["TAPSTREAM_FFTW_WISDOM"] = env_wisdom
        noise_wav, noise_raw = f"{work}/noise.wav", f"{work}/noise.f32"
        # A different noise on each input (white, pink, brown, ...), so that
        # a path fed from the wrong input shows.
        colours = ["whitenoise", "pinknoise", "brownnoise"]
        synth = [colours[i % len(colours)] for i in range(inputs)]
        subprocess.run(["sox", "-R", "-n", "-r", str(RATE), "-c", str(inputs), "-b", "32", "-e",
                        "floating-point", noise_wav, "synth", str(args.seconds), *synth,
                        "vol", "0.5"], check=True)
        subprocess.run(["sox", noise_wav, "-t", "f32", noise_raw], check=True)

        commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True,
                                text=True).stdout.strip() or "unknown"
        cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                    if l.startswith("model name")), platform.processor())
        print(f"machine: {cpu}, {os.cpu_count()} cores; load {os.getloadavg()}; commit {commit}")
        print(f"job: {args.seconds} s of {inputs}-channel {RATE} Hz float32 noise through "
              f"{os.path.basename(args.matrix)} ({inputs} -> {outputs}, {len(paths)} paths, "
              f"{max(len(t) for _, _, t in paths)} taps at most); median of {args.runs} runs")

        ours = f"{work}/tapstream.wav"
        ts_argv = [args.tapstream, "-q", "process", noise_wav, ours, "--matrix", args.matrix,
                   "--backend", "cpu"]
        tapstream = median_of(ts_argv, args.runs)
        described = subprocess.run(ts_argv[:1] + ts_argv[2:], capture_output=True, text=True).stderr
        engine = described.split(" through ", 1)[1].split(" in ", 1)[0] if " through " in described else ""
        print(f"  tapstream process --matrix --backend cpu: wall {tapstream['wall_s']:.3f} s, "
              f"cpu {tapstream['cpu_s']:.3f} s ({engine})")

        best = None
        brutefir = []
        for partition in map(int, args.partitions.split(",")):
            theirs = f"{work}/brutefir-{partition}.f32"
            cfg = brutefir_config(work, inputs, outputs, paths, partition, noise_raw, theirs)
            r = median_of(["brutefir", "-nodefault", cfg], args.runs)
            r["partition"] = partition
            brutefir.append(r)
            print(f"  brutefir filter_length {partition}: wall {r['wall_s']:.3f} s, cpu {r['cpu_s']:.3f} s")
            if best is None or r["wall_s"] < best["wall_s"]:
                best = r
        ratio = best["wall_s"] / tapstream["wall_s"]
        print(f"  throughput tapstream / BruteFIR (fastest, partition {best['partition']}): "
              f"{ratio:.2f}x wall (target 2x)")

        theirs = array.array("f")
        with open(f"{work}/brutefir-{best['partition']}.f32", "rb") as f:
            theirs.frombytes(f.read())
        error = relative_error(wav_float_samples(ours), theirs)
        print(f"  tapstream against BruteFIR: relative error {error:.2e} (bound 1e-5)")

    result = {
        "benchmark": "compare-matrix.py",
        "commit": commit,
        "machine": {"cpu": cpu, "cores": os.cpu_count(), "load_average": os.getloadavg()},
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "job": f"{args.seconds} s of {inputs}-channel {RATE} Hz float32 white noise through "
               f"{os.path.relpath(args.matrix, ROOT)}, file in and out; median of {args.runs} runs",
        "tapstream": dict(tapstream, engine=engine),
        "brutefir": brutefir,
        "ratio_wall": round(ratio, 3),
        "relative_error_vs_brutefir": error,
    }
    out = args.out or os.path.join(
        ROOT, "bench/results", f"compare-matrix-{datetime.date.today().isoformat()}-{commit[:7]}.json")
    with open(out, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    print(f"wrote {out}")
    return 0 if error <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
