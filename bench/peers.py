#!/usr/bin/env python3
"""The GPU tools people use today for FIR filtering, timed on the sizes of
tapstream's offline and streaming benchmarks, plus the two floors.

Runs on the GPU machine (PyTorch, torchaudio, CuPy, NumPy, SciPy). For each
tap count it times, on 8 channels x 2^22 samples with one filter per channel:
  torch.nn.functional.conv1d (cuDNN, depthwise: groups=channels; taps flipped
      because conv1d is a cross-correlation), fp32 and with PyTorch's default
      TF32 setting,
  torchaudio.functional.fftconvolve,
  cupyx.scipy.signal.oaconvolve and fftconvolve (batched along axis 1),
with CUDA events after warm-up, median of several runs. Every peer's output is
checked against a float64 reference on two windows (start and middle of a
channel), so a fast wrong answer is not counted.

Floors: the measured device-to-device copy bandwidth (bytes read + written)
gives the time to read the input and write the output once; the measured fp32
FMA rate gives the time of the direct form's multiply-adds.

Also times the streaming round trip of a PyTorch pipeline (pinned host input
-> device -> conv1d with carried halo -> pinned host output, synchronised per
block) for the streaming configurations of the benchmark.

usage: peers.py [--out FILE.json] [--quick]
"""

import argparse
import datetime
import json
import math
import platform
import sys
import time

try:  # the GPU stack; --compare-only needs none of it
    import numpy as np
    import scipy.signal
    import torch
    import torch.nn.functional as F
except ImportError as missing:
    np = scipy = torch = F = None
    GPU_STACK_ERROR = missing

SEED = 20261122
CHANNELS = 8
SAMPLES = 1 << 22
TAPS = [32, 256, 2048, 16384, 131072]
STREAMING = [(2, 256, 2048), (8, 256, 2048), (2, 64, 512), (32, 1024, 4096)]
MAX_RUN_S = 2.0  # a peer predicted to take longer than this per run is skipped
TIME_BUDGET_S = 3.0  # repeats per measurement are limited to about this much time


def log(*args):
    print(*args, flush=True)


def time_cuda(fn, max_run_s=MAX_RUN_S, min_reps=3, max_reps=20):
    """Median seconds per call of fn() (enqueues GPU work on the current torch
    stream), timed with CUDA events after one warm-up call. Returns
    (median_s, all_s, last_output)."""
    out = fn()  # warm-up: plans, cuDNN autotuning, module loads
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    out = fn()
    stop.record()
    stop.synchronize()
    first = start.elapsed_time(stop) / 1e3
    times = [first]
    reps = max(min_reps, min(max_reps, int(TIME_BUDGET_S / max(first, 1e-6))))
    for _ in range(reps - 1):
        start.record()
        out = fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / 1e3)
    return float(np.median(times)), times, out


def measure_copy_bandwidth():
    """Device-to-device copy of 1 GiB, bytes read + written per second."""
    n = 1 << 28  # floats: 1 GiB
    src = torch.randn(n, device="cuda")
    dst = torch.empty_like(src)
    median, times, _ = time_cuda(lambda: dst.copy_(src), min_reps=20, max_reps=20)
    return 2 * n * 4 / median, median


def measure_fma_rate():
    """fp32 fused multiply-adds per second from a register-only kernel with
    8 independent accumulator chains per thread (CuPy RawKernel)."""
    import cupy as cp

    src = r"""
    extern "C" __global__ void fma_loop(float* out, int iters, float a, float b) {
      float acc[8];
      #pragma unroll
      for (int k = 0; k < 8; ++k) acc[k] = threadIdx.x * 1e-3f + k;
      for (int i = 0; i < iters; ++i) {
        #pragma unroll
        for (int k = 0; k < 8; ++k) acc[k] = fmaf(acc[k], a, b);
      }
      float s = 0.f;
      #pragma unroll
      for (int k = 0; k < 8; ++k) s += acc[k];
      out[blockIdx.x * blockDim.x + threadIdx.x] = s;
    }
    """
    kernel = cp.RawKernel(src, "fma_loop")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    blocks, threads, iters = sms * 16, 256, 4096
    out = cp.empty(blocks * threads, dtype=cp.float32)
    args = (out, np.int32(iters), np.float32(0.999999), np.float32(1e-7))

    def run():
        kernel((blocks,), (threads,), args)
        return out

    median, _, _ = time_cuda(run, min_reps=10, max_reps=10)
    if not bool(cp.isfinite(out).all()):
        raise RuntimeError("FMA kernel produced non-finite values")
    fmas = blocks * threads * iters * 8
    return fmas / median, median


def reference_windows(x_host, h_host, taps):
    """float64 causal-convolution values on two windows: channel 0 frames
    [0, 4096) and channel CHANNELS-1 frames [N/2, N/2 + 2048)."""
    windows = []
    x0 = x_host[0, :4096].astype(np.float64)
    h0 = h_host[0].astype(np.float64)
    windows.append((0, 0, 4096, np.convolve(x0, h0[:4096])[:4096]))
    c, n0, length = CHANNELS - 1, SAMPLES // 2, 2048
    seg = x_host[c, n0 - taps + 1 : n0 + length].astype(np.float64)
    windows.append((c, n0, length, scipy.signal.fftconvolve(seg, h_host[c].astype(np.float64), mode="valid")))
    return windows


def relative_error(out, windows):
    """Max over windows of ||out - ref|| / ||ref||; out indexes [channel, frame]."""
    worst = 0.0
    for c, n0, length, ref in windows:
        got = out[c, n0 : n0 + length]
        got = got.get() if hasattr(got, "get") else got.detach().cpu().numpy()
        got = got.astype(np.float64)
        if not np.all(np.isfinite(got)):
            return float("nan")
        worst = max(worst, float(np.linalg.norm(got - ref) / np.linalg.norm(ref)))
    return worst


def make_peers(x, h, taps):
    """name -> (callable returning a [channel, frame] array whose first SAMPLES
    frames are the causal convolution, work model for skip prediction)."""
    peers = {}
    weight = torch.flip(h, dims=[1]).reshape(CHANNELS, 1, taps).contiguous()
    x3 = x.reshape(1, CHANNELS, SAMPLES)

    def conv1d():
        return F.conv1d(x3, weight, padding=taps - 1, groups=CHANNELS)[0]

    def conv1d_fp32():
        torch.backends.cudnn.allow_tf32 = False
        try:
            return conv1d()
        finally:
            torch.backends.cudnn.allow_tf32 = True

    peers["torch.conv1d(fp32)"] = conv1d_fp32
    peers["torch.conv1d(tf32 default)"] = conv1d

    try:
        import torchaudio.functional as AF

        peers["torchaudio.fftconvolve"] = lambda: AF.fftconvolve(x, h, mode="full")
    except Exception as e:  # noqa: BLE001 - record why the peer is missing
        peers["torchaudio.fftconvolve"] = e

    try:
        import cupy as cp
        import cupyx.scipy.signal as cps

        xc, hc = cp.from_dlpack(x), cp.from_dlpack(h)
        peers["cupyx.oaconvolve"] = lambda: cps.oaconvolve(xc, hc, mode="full", axes=1)
        peers["cupyx.fftconvolve"] = lambda: cps.fftconvolve(xc, hc, mode="full", axes=1)
    except Exception as e:  # noqa: BLE001
        peers["cupyx.oaconvolve"] = e
        peers["cupyx.fftconvolve"] = e
    return peers


def offline(floors, quick):
    gen = torch.Generator(device="cuda").manual_seed(SEED)
    x = torch.randn(CHANNELS, SAMPLES, device="cuda", generator=gen)
    x_host = x.cpu().numpy()
    results = []
    last_time = {}  # peer -> (taps, seconds): predicts the next size's time
    taps_list = TAPS[:3] if quick else TAPS
    for taps in taps_list:
        h = torch.randn(CHANNELS, taps, device="cuda", generator=gen) / math.sqrt(taps)
        h_host = h.cpu().numpy()
        windows = reference_windows(x_host, h_host, taps)
        outputs = CHANNELS * SAMPLES
        bytes_moved = 2 * outputs * 4
        fmas = outputs * taps
        entry = {
            "taps": taps,
            "channels": CHANNELS,
            "samples": SAMPLES,
            "bytes_min": bytes_moved,
            "fma_direct": fmas,
            "floor_memory_s": bytes_moved / floors["copy_bytes_per_s"],
            "floor_direct_fma_s": fmas / floors["fma_per_s"],
            "peers": {},
        }
        log(f"\n== {CHANNELS} ch x {SAMPLES} samples, {taps} taps: floor memory "
            f"{entry['floor_memory_s'] * 1e3:.3f} ms, direct FMA {entry['floor_direct_fma_s'] * 1e3:.3f} ms")
        for name, fn in make_peers(x, h, taps).items():
            rec = {}
            if isinstance(fn, Exception):
                rec["skipped"] = f"unavailable: {fn!r}"
            else:
                prev = last_time.get(name)
                predicted = None
                if prev is not None and name.startswith("torch.conv1d"):
                    predicted = prev[1] * taps / prev[0]  # direct form: linear in taps
                if predicted is not None and predicted > MAX_RUN_S:
                    rec["skipped"] = (f"predicted {predicted:.1f} s per run (linear in taps from "
                                      f"{prev[1] * 1e3:.1f} ms at {prev[0]} taps) > {MAX_RUN_S} s")
                else:
                    try:
                        median, times, out = time_cuda(fn)
                        rec.update(median_s=median, runs=len(times), min_s=min(times), max_s=max(times),
                                   output_samples_per_s=outputs / median,
                                   rel_err=relative_error(out, windows))
                        last_time[name] = (taps, median)
                        del out
                    except Exception as e:  # noqa: BLE001 - e.g. out of memory at huge sizes
                        rec["skipped"] = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
                    torch.cuda.empty_cache()
            entry["peers"][name] = rec
            if "skipped" in rec:
                log(f"  {name:28s} skipped: {rec['skipped']}")
            else:
                log(f"  {name:28s} {rec['median_s'] * 1e3:10.3f} ms  {rec['output_samples_per_s'] / 1e9:8.2f} "
                    f"Gsamples/s  rel_err {rec['rel_err']:.2e}  ({rec['runs']} runs)")
        timed = {k: v for k, v in entry["peers"].items() if "median_s" in v and v["rel_err"] < 1e-3}
        if timed:
            best = min(timed, key=lambda k: timed[k]["median_s"])
            entry["best_peer"] = best
            entry["best_peer_s"] = timed[best]["median_s"]
        results.append(entry)
    return results


def streaming(quick):
    """PyTorch's streaming round trip per block: pinned host -> device, conv1d
    over [halo | block], halo kept on the device, device -> pinned host, sync."""
    torch.backends.cudnn.allow_tf32 = False
    results = []
    blocks_timed = 2000 if quick else 10000
    for channels, frames, taps in STREAMING:
        gen = torch.Generator(device="cuda").manual_seed(SEED + taps)
        h = torch.randn(channels, taps, device="cuda", generator=gen) / math.sqrt(taps)
        weight = torch.flip(h, dims=[1]).reshape(channels, 1, taps).contiguous()
        host_in = torch.randn(channels, frames).pin_memory()
        host_out = torch.empty(channels, frames).pin_memory()
        window = torch.zeros(1, channels, taps - 1 + frames, device="cuda")
        stream = torch.cuda.Stream()
        lat = []
        with torch.cuda.stream(stream):
            for i in range(500 + blocks_timed):
                t0 = time.perf_counter()
                window[0, :, : taps - 1].copy_(window[0, :, frames:].clone())
                window[0, :, taps - 1 :].copy_(host_in, non_blocking=True)
                y = F.conv1d(window, weight, groups=channels)
                host_out.copy_(y[0], non_blocking=True)
                stream.synchronize()
                t1 = time.perf_counter()
                if i >= 500:
                    lat.append(t1 - t0)
        lat = np.array(lat)
        rec = {"channels": channels, "frames": frames, "taps": taps, "blocks": len(lat),
               "p50_s": float(np.percentile(lat, 50)), "p99_s": float(np.percentile(lat, 99)),
               "max_s": float(lat.max())}
        log(f"  torch streaming ({channels} ch, {frames} frames, {taps} taps): p50 {rec['p50_s'] * 1e6:.1f} us  "
            f"p99 {rec['p99_s'] * 1e6:.1f} us  max {rec['max_s'] * 1e6:.1f} us over {len(lat)} blocks")
        results.append(rec)
    return results


def compare(peers_report, engine_report):
    """Side-by-side table: tapstream (best variant and automatic choice) vs
    each peer, the ratio tapstream / best peer in throughput, the floors and
    the targets of issue 3. Returns the rows as a list of dicts."""
    rows = []
    engine_offline = {e["taps"]: e for e in engine_report.get("offline", [])
                      if e.get("filters", "per-channel") == "per-channel"}

    log("\n== side by side: 8 ch x 2^22 samples, times in ms (lower is better); "
        "ratio = tapstream throughput / best peer throughput")
    device = engine_report.get("device", {})
    if device.get("copy_bytes_per_s") and device.get("fma_per_s"):
        log(f"floors from cuda_engine_bench's ceilings: copy {device['copy_bytes_per_s'] / 1e12:.3f} TB/s, "
            f"FMA {device['fma_per_s'] / 1e12:.2f} TFMA/s")
    names = []
    for e in peers_report["offline"]:
        for n in e["peers"]:
            if n not in names:
                names.append(n)
    header = f"{'taps':>7} {'ts best':>9} {'ts auto':>9} " + " ".join(f"{n[:14]:>14}" for n in names)
    header += f" {'ratio':>7} {'mem floor':>9} {'FMA floor':>9} {'best/memfloor':>13}"
    log(header)
    for e in peers_report["offline"]:
        taps = e["taps"]
        eng = engine_offline.get(taps, {})
        if device.get("copy_bytes_per_s") and device.get("fma_per_s"):
            e = dict(e, floor_memory_s=e["bytes_min"] / device["copy_bytes_per_s"],
                     floor_direct_fma_s=e["fma_direct"] / device["fma_per_s"])
        timed = [r for r in eng.get("runs", []) if "median_s" in r and r.get("ok", True)]
        best = min(timed, key=lambda r: r["median_s"]) if timed else None
        auto = next((r for r in timed if r["variant"] == "auto"), None)
        cells = []
        for n in names:
            p = e["peers"].get(n, {})
            cells.append(f"{p['median_s'] * 1e3:14.3f}" if "median_s" in p else f"{'skip':>14}")
        ratio = e["best_peer_s"] / best["median_s"] if best and "best_peer_s" in e else float("nan")
        frac = e["floor_memory_s"] / best["median_s"] if best else float("nan")
        line = (f"{taps:7d} {best['median_s'] * 1e3 if best else float('nan'):9.3f} "
                f"{auto['median_s'] * 1e3 if auto else float('nan'):9.3f} " + " ".join(cells) +
                f" {ratio:7.2f} {e['floor_memory_s'] * 1e3:9.3f} {e['floor_direct_fma_s'] * 1e3:9.3f} {frac:13.2f}")
        log(line)
        rows.append({"taps": taps, "tapstream_best": best and best["variant"],
                     "tapstream_best_s": best and best["median_s"], "tapstream_auto_s": auto and auto["median_s"],
                     "best_peer": e.get("best_peer"), "best_peer_s": e.get("best_peer_s"),
                     "ratio_vs_best_peer": ratio, "floor_memory_s": e["floor_memory_s"],
                     "floor_direct_fma_s": e["floor_direct_fma_s"], "fraction_of_memory_floor": frac,
                     "target_3x_met": bool(ratio >= 3.0),
                     "target_half_memory_floor_met": (bool(frac >= 0.5) if taps == 32 else None)})
    for r in rows:
        log(f"  {r['taps']:7d} taps: best tapstream variant {r['tapstream_best']}, best peer {r['best_peer']}")
    peer_stream = {(s["channels"], s["frames"], s["taps"]): s for s in peers_report.get("streaming", [])}
    log("\n== streaming round trip per block (us): tapstream vs the PyTorch pipeline")
    log(f"{'config':>18} {'buffers':>29} {'ts p50':>8} {'ts p99':>8} {'ts max':>8} {'torch p50':>10} "
        f"{'torch p99':>10} {'torch max':>10}")
    engine_streaming = [dict(s) for s in engine_report.get("streaming", [])]
    for s in engine_report.get("streaming_copy_path", []):  # zero-copy path off
        engine_streaming.append(dict(s, buffers=s.get("buffers", "") + " (copy)"))
    for s in engine_streaming:
        key = (s["channels"], s["frames"], s["taps"])
        p = peer_stream.get(key, {})
        if "p50_s" not in s:
            log(f"{str(key):>18} {s.get('buffers', ''):>29} skipped: {s.get('skipped', '?')}")
            continue
        log(f"{str(key):>18} {s.get('buffers', ''):>29} {s['p50_s'] * 1e6:8.1f} {s['p99_s'] * 1e6:8.1f} "
            f"{s['max_s'] * 1e6:8.1f} "
            f"{p.get('p50_s', float('nan')) * 1e6:10.1f} {p.get('p99_s', float('nan')) * 1e6:10.1f} "
            f"{p.get('max_s', float('nan')) * 1e6:10.1f}")
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--quick", action="store_true", help="three tap counts, fewer streaming blocks")
    parser.add_argument("--engine", help="tapstream's cuda_engine_bench JSON: print the side-by-side table")
    parser.add_argument("--compare-only", metavar="PEERS_JSON",
                        help="no GPU work: print the side-by-side table from saved peers and --engine JSON")
    args = parser.parse_args()
    if args.compare_only:
        with open(args.compare_only) as f:
            peers_report = json.load(f)
        with open(args.engine) as f:
            compare(peers_report, json.load(f))
        return
    if torch is None:
        sys.exit(f"peers.py: the GPU stack is missing here: {GPU_STACK_ERROR}")
    if not torch.cuda.is_available():
        sys.exit("peers.py: no CUDA device visible to PyTorch")
    torch.backends.cudnn.benchmark = True  # let cuDNN pick its fastest algorithm (warm-up pays for it)

    info = {
        "gpu": torch.cuda.get_device_name(0),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "numpy": np.__version__,
    }
    for mod in ("torchaudio", "cupy"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception as e:  # noqa: BLE001
            info[mod] = f"unavailable: {e!r}"
    log("peers.py on", info["gpu"], "torch", info["torch"], "cudnn", info["cudnn"],
        "torchaudio", info["torchaudio"], "cupy", info["cupy"])

    copy_bw, copy_s = measure_copy_bandwidth()
    fma_rate, fma_s = measure_fma_rate()
    floors = {"copy_bytes_per_s": copy_bw, "copy_1GiB_s": copy_s, "fma_per_s": fma_rate, "fma_kernel_s": fma_s}
    log(f"floors: d2d copy {copy_bw / 1e12:.3f} TB/s (read+write), fp32 FMA {fma_rate / 1e12:.2f} TFMA/s "
        f"({2 * fma_rate / 1e12:.1f} TFLOP/s)")

    report = {"info": info, "floors": floors, "offline": offline(floors, args.quick)}
    log("\n== streaming round trip, PyTorch pipeline (pinned host in -> conv1d fp32 -> pinned host out)")
    report["streaming"] = streaming(args.quick)

    log("\n== summary: best correct peer per size (output samples/s) and floors")
    log(f"{'taps':>7} {'best peer':28s} {'peer ms':>10} {'floor mem ms':>12} {'floor FMA ms':>12}")
    for e in report["offline"]:
        log(f"{e['taps']:7d} {e.get('best_peer', '-'):28s} {e.get('best_peer_s', float('nan')) * 1e3:10.3f} "
            f"{e['floor_memory_s'] * 1e3:12.3f} {e['floor_direct_fma_s'] * 1e3:12.3f}")
    if args.engine:
        try:
            with open(args.engine) as f:
                report["comparison"] = compare(report, json.load(f))
        except OSError as e:
            log(f"no side-by-side table: cannot read {args.engine}: {e}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
        log("wrote", args.out)


if __name__ == "__main__":
    main()
