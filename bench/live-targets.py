#!/usr/bin/env python3
"""Issue 24's live targets for headphone layouts, measured on the daemon as a
user runs it: `tapstream run` on a private JACK dummy server (jackd -n NAME
-d dummy -p PERIOD), its CPU time read from /proc/PID/stat, its late
periods and processing times from `tapstream ctl status`.

  hesuvi: 7.1 -> 2 from a 14-channel HeSuVi impulse response of 8192 taps
          (layout = "hesuvi", 14 paths). Target (CPU engine, 64-frame
          periods, the 2-core machine): <= 10 % of one core.
  sofa:   SOURCES virtual sources -> binaural from a SOFA set of 512-tap
          HRIRs ([sofa] table, SOURCES x 2 paths). Target (CPU engine,
          64 sources, 64-frame periods): 0 late periods over 60 s.
          --search (on a GPU machine: --engine cuda): doubles the sources
          from --sources while a run has 0 late periods, then bisects; prints
          the largest count.

The filters are synthetic (decaying noise, every tap non-zero), written with
tools/make-layout-examples.py's writers; the SOFA set has 72 azimuths x 3
elevations, so that 64 sources meet 64 distinct measured directions.
Prints the numbers and PASS/FAIL lines; --json writes them.

--endpoint files (a machine without JACK, e.g. the GPU machine): the daemon
reads a noise file paced at the sample rate instead (`[input] realtime =
true`, its driver thread acts as the device's callback and counts late
periods as one would, as bench/load-test-files.py does) and writes a file.

  bench/live-targets.py hesuvi --tapstream build/daemon/tapstream --seconds 60
  bench/live-targets.py sofa --sources 64 --seconds 60
  bench/live-targets.py sofa --engine cuda --search --sources 256 --seconds 20
"""

import argparse
import importlib.util
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RATE = 48000


def layout_tools():
    spec = importlib.util.spec_from_file_location(
        "make_layout_examples", os.path.join(ROOT, "tools", "make-layout-examples.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def hesuvi_matrix(out_dir, taps):
    tools = layout_tools()
    channels = [tools.decaying_noise(200 + k, taps, 0, 0.1, taps / 7.0) for k in range(14)]
    tools.write_wav(os.path.join(out_dir, "hesuvi-8192.wav"), channels)
    path = os.path.join(out_dir, "hesuvi.toml")
    with open(path, "w") as f:
        f.write('inputs = 8\noutputs = 2\n\n[dense]\nfile = "hesuvi-8192.wav"\n'
                'layout = "hesuvi"\ngain_db = -6.0\n')
    return path


SOFA_DIRECTIONS = [(az * 5.0, el) for el in (0.0, 30.0, -30.0) for az in range(72)]


def sofa_set(out_dir, taps):
    """A SimpleFreeFieldHRIR set of 216 directions x 2 ears x `taps`."""
    tools = layout_tools()
    tools.SOFA_DIRECTIONS = SOFA_DIRECTIONS
    tools.SOFA_TAPS = taps
    tools.sofa_response = lambda m, ear, n: round(
        0.3 * math.exp(-n / (taps / 6.0)) * math.cos(0.37 * m + 1.3 * ear + 0.9 * n), 6) or 1e-6
    tools.sofa(out_dir)
    return os.path.join(out_dir, "tiny-hrtf-48k.sofa")


def hrir_pair(out_dir, taps):
    """Where ncgen is missing (no SOFA file can be written): one left and right
    HRIR as a two-channel WAV, every source's paths reading it (the same N -> 2
    matrix of `taps`-tap paths as the SOFA form makes, so the same work)."""
    tools = layout_tools()
    tools.write_wav(os.path.join(out_dir, "hrir-pair.wav"),
                    [tools.decaying_noise(300 + ear, taps, 0, 0.3, taps / 6.0) for ear in (0, 1)])
    return None


def sparse_matrix(out_dir, sources):
    path = os.path.join(out_dir, "sources-%d.toml" % sources)
    with open(path, "w") as f:
        f.write("inputs = %d\noutputs = 2\n" % sources)
        for s in range(sources):
            for ear in (0, 1):
                f.write('\n[[path]]\ninput = %d\noutput = %d\nfile = "hrir-pair.wav"\n'
                        "channel = %d\ngain_db = -6.0\n" % (s, ear, ear))
    return path


def sofa_matrix(out_dir, sofa_file, sources):
    if sofa_file is None:
        return sparse_matrix(out_dir, sources)
    path = os.path.join(out_dir, "sofa-%d.toml" % sources)
    with open(path, "w") as f:
        f.write("inputs = %d\noutputs = 2\n\n[sofa]\nfile = \"%s\"\ngain_db = -6.0\n"
                % (sources, sofa_file))
        for s in range(sources):
            azimuth, elevation = SOFA_DIRECTIONS[s % len(SOFA_DIRECTIONS)]
            if azimuth > 180.0:
                azimuth -= 360.0
            f.write("\n[[sofa.source]]\ninput = %d\nazimuth = %g\nelevation = %g\n"
                    % (s, azimuth, elevation))
    return path


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime


def thread_counters(pid):
    """Each thread of the daemon: its CPU ticks, context switches (involuntary:
    preempted) and page faults so far, from /proc."""
    counters = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        base = "/proc/%d/task/%s/" % (pid, tid)
        try:
            with open(base + "status") as f:
                status = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
            with open(base + "stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        counters[int(tid)] = {
            "involuntary_switches": int(status["nonvoluntary_ctxt_switches"]),
            "voluntary_switches": int(status["voluntary_ctxt_switches"]),
            "minor_faults": int(fields[7]), "major_faults": int(fields[9]),
            "cpu_ticks": int(fields[11]) + int(fields[12])}
    return counters


def callback_thread(before, after, tid):
    """What the callback's thread went through between two thread_counters():
    `tid` from the status's "scheduling" block, else (a build without it) the
    thread that used the most CPU, which is the callback when the engine runs
    in it."""
    common = [t for t in after if t in before]
    if not common:
        return None
    guessed = not tid or tid not in common
    if guessed:
        tid = max(common, key=lambda t: after[t]["cpu_ticks"] - before[t]["cpu_ticks"])
    delta = {k: after[tid][k] - before[tid][k] for k in after[tid]}
    delta["thread"] = tid
    delta["guessed_by_cpu"] = guessed
    return delta


def ctl_status(tapstream, socket, env):
    out = subprocess.run([tapstream, "ctl", "--socket", socket, "status"], env=env,
                         capture_output=True, text=True, timeout=20)
    return json.loads(out.stdout)


def wait_for(what, predicate, seconds, log):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise RuntimeError("%s did not happen within %d s; log:\n%s" % (what, seconds, log()))


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def write_noise_wav(path, channels, frames):
    """int16 PCM white noise at RATE: the load test's writer."""
    spec = importlib.util.spec_from_file_location(
        "load_test_files", os.path.join(HERE, "load-test-files.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.RATE == RATE
    module.write_noise_wav(path, channels, frames)


def run_daemon(args, work, matrix, inputs, max_taps):
    """One daemon run (on a private JACK dummy server, or paced files);
    returns its numbers."""
    name = "tapstream-targets-%d" % os.getpid()
    env = dict(os.environ, JACK_DEFAULT_SERVER=name, JACK_NO_AUDIO_RESERVATION="1")
    socket = os.path.join(work, "control.sock")
    config = os.path.join(work, "live.toml")
    if args.endpoint == "jack":
        endpoints = '[input]\ndevice = "system"\n[output]\ndevice = "system"\n'
    else:
        write_noise_wav(os.path.join(work, "in.wav"), inputs,
                        int((args.settle + args.seconds + 15) * RATE))
        endpoints = '[input]\nfile = "in.wav"\nrealtime = true\n[output]\nfile = "out.wav"\n'
    with open(config, "w") as f:
        f.write("sample_rate = %d\nblock_frames = %d\nlatency = \"%s\"\n%s"
                "[filter]\nmatrix = \"%s\"\nwatch = false\nmax_taps = %d\n"
                "[engine]\nbackend = \"%s\"\n[control]\nsocket = \"%s\"\n"
                "[log]\nlevel = \"info\"\n"
                % (RATE, args.period, args.latency, endpoints, matrix, max_taps, args.engine,
                   socket))
    jackd_err = os.path.join(work, "jackd.err")
    daemon_err = os.path.join(work, "daemon.err")
    jackd = None
    if args.endpoint == "jack":
        jackd = subprocess.Popen(
            ["jackd", "-n", name, "--realtime" if args.realtime else "--no-realtime"] +
            (["-P", str(args.jackd_priority)] if args.realtime and args.jackd_priority else []) +
            ["-p", str(max(4096, 2 * inputs + 64)), "-d", "dummy", "-r", str(RATE), "-p",
             str(args.period), "-C", str(inputs), "-P", "2"],
            env=env, stdout=subprocess.DEVNULL, stderr=open(jackd_err, "w"))
    daemon = None
    try:
        if jackd is not None:
            # Up when its ports are listed (a loaded machine takes a while).
            wait_for("jackd's ports", lambda: jackd.poll() is not None or subprocess.run(
                ["jack_lsp"], env=env, capture_output=True, text=True,
                timeout=20).stdout.count("system:capture_") >= inputs, 60,
                lambda: read(jackd_err))
            if jackd.poll() is not None:
                raise RuntimeError("jackd exited:\n" + read(jackd_err))
        daemon = subprocess.Popen([args.tapstream, "run", "--config", config], env=env,
                                  stdout=subprocess.DEVNULL, stderr=open(daemon_err, "w"))
        wait_for("the daemon's \"running:\" line",
                 lambda: "running:" in read(daemon_err) or daemon.poll() is not None, 120,
                 lambda: read(jackd_err) + read(daemon_err))
        if daemon.poll() is not None:
            raise RuntimeError("the daemon exited:\n" + read(daemon_err))
        time.sleep(args.settle)
        load_before = os.getloadavg()
        before = ctl_status(args.tapstream, socket, env)
        counters0 = thread_counters(daemon.pid)
        cpu0, t0 = cpu_seconds(daemon.pid), time.monotonic()
        time.sleep(args.seconds)
        cpu1, t1 = cpu_seconds(daemon.pid), time.monotonic()
        counters1 = thread_counters(daemon.pid)
        after = ctl_status(args.tapstream, socket, env)
        load_after = os.getloadavg()
    finally:
        for child in (daemon, jackd):
            if child is not None and child.poll() is None:
                child.send_signal(signal.SIGTERM)
                try:
                    child.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    child.kill()
    processing = after.get("processing_us", {})
    blocks = after["blocks"] - before["blocks"]
    audio_seconds = blocks * args.period / RATE
    return {
        "engine": after.get("engine", ""),
        "paths": len(after.get("matrix", {}).get("paths", [])),
        "seconds": t1 - t0,
        "cpu_percent_of_one_core": 100.0 * (cpu1 - cpu0) / (t1 - t0),
        # A loaded machine's dummy driver runs slow (fewer periods than the
        # wall clock's): per second of audio is what a real-time device costs.
        "audio_seconds": audio_seconds,
        "cpu_percent_of_one_core_at_real_time":
            100.0 * (cpu1 - cpu0) / audio_seconds if audio_seconds > 0 else float("inf"),
        "late_periods": after["late_periods"] - before["late_periods"],
        "underruns": after["underruns"] - before["underruns"],
        "overruns": after["overruns"] - before["overruns"],
        "blocks": blocks,
        "latency_frames": after.get("latency_frames"),
        "processing_us": processing,
        # The callback's scheduling as the daemon reports it, and what its
        # thread went through during the measurement (preemptions, faults).
        "scheduling": after.get("scheduling"),
        "callback_thread": callback_thread(
            counters0, counters1, (after.get("scheduling") or {}).get("callback_thread", 0)),
        "load_average_before": load_before,
        "load_average_after": load_after,
    }


def describe(r):
    p = r["processing_us"]
    rt = r.get("scheduling") or {}
    thread = r.get("callback_thread")
    callback = ""
    if rt.get("callback_thread"):
        callback = "; callback %s%s" % (
            "SCHED_FIFO %d" % rt["callback_priority"] if rt.get("callback_priority") else
            "normal priority", " (raised by tapstream)" if rt.get("callback_raised") else "")
    if thread:
        callback += "; callback thread%s preempted %d times, %d minor / %d major faults" % (
            " (the busiest)" if thread["guessed_by_cpu"] else "",
            thread["involuntary_switches"], thread["minor_faults"], thread["major_faults"])
    return ("%d paths, %.1f s (%.1f s of audio): CPU %.2f %% of one core per second of audio "
            "(%.2f %% of the wall clock), late periods %d, underruns %d, blocks %d; block p50 "
            "%.1f p99.9 %.1f max %.1f us of %.1f%s; load %.2f -> %.2f; %s"
            % (r["paths"], r["seconds"], r["audio_seconds"],
               r["cpu_percent_of_one_core_at_real_time"], r["cpu_percent_of_one_core"],
               r["late_periods"], r["underruns"], r["blocks"], p.get("p50", 0), p.get("p999", 0),
               p.get("max", 0), p.get("block_period", 0), callback,
               r["load_average_before"][0], r["load_average_after"][0], r["engine"]))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("case", choices=["hesuvi", "sofa"])
    parser.add_argument("--tapstream", default=os.path.join(ROOT, "build", "daemon", "tapstream"))
    parser.add_argument("--engine", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--period", type=int, default=64)
    parser.add_argument("--latency", default="zero", choices=["zero", "buffered"])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--settle", type=float, default=3.0, help="seconds before measuring")
    parser.add_argument("--taps", type=int, default=0, help="8192 (hesuvi) or 512 (sofa)")
    parser.add_argument("--sources", type=int, default=64)
    parser.add_argument("--search", action="store_true")
    parser.add_argument("--max-sources", type=int, default=65536)
    parser.add_argument("--endpoint", default="jack", choices=["jack", "files"])
    parser.add_argument("--realtime", action="store_true",
                        help="jackd --realtime: JACK's threads and its clients' process threads "
                             "at SCHED_FIFO (the daemon's callback at the server's client "
                             "priority), as a live setup runs (needs the privilege); without "
                             "it the daemon raises its callback itself where the engine runs "
                             "in it")
    parser.add_argument("--jackd-priority", type=int, default=0,
                        help="with --realtime: jackd -P (0: JACK's default, 10; its clients "
                             "run 5 below)")
    parser.add_argument("--floor", action="store_true",
                        help="also run the same layout with 1-tap filters (the daemon's floor: "
                             "everything but the filtering), in the same invocation")
    parser.add_argument("--rounds", type=int, default=1,
                        help="sofa: repeat the run (and its floor, with --floor) this many "
                             "times, alternated: filters, floor, filters, floor")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    if args.endpoint == "jack" and shutil.which("jackd") is None:
        sys.exit("live-targets: jackd is not installed (Debian: jackd2)")
    if not os.access(args.tapstream, os.X_OK):
        sys.exit("live-targets: %s is not an executable" % args.tapstream)
    results = {"case": args.case, "engine": args.engine, "period": args.period,
               "latency": args.latency, "endpoint": args.endpoint, "realtime": args.realtime,
               "rate": RATE, "runs": [], "load_average_before": os.getloadavg()}
    ok = True
    with tempfile.TemporaryDirectory(prefix="tapstream-targets-") as work:
        if args.case == "hesuvi":
            taps = args.taps or 8192
            matrix = hesuvi_matrix(work, taps)
            r = run_daemon(args, work, matrix, 8, taps)
            results["runs"].append(r)
            print("hesuvi 7.1 -> 2, %d taps, %s engine, %d-frame periods (%s): %s"
                  % (taps, args.engine, args.period, args.latency, describe(r)))
            ok = r["cpu_percent_of_one_core_at_real_time"] <= 10.0
            print("%s hesuvi: %.2f %% of one core per second of audio (target <= 10 %%); "
                  "%d late periods"
                  % ("PASS" if ok else "FAIL", r["cpu_percent_of_one_core_at_real_time"],
                     r["late_periods"]))
            if args.floor:
                floor_dir = os.path.join(work, "floor")
                os.mkdir(floor_dir)
                f = run_daemon(args, floor_dir, hesuvi_matrix(floor_dir, 1), 8, 1)
                f["floor"] = True
                results["runs"].append(f)
                print("floor, the same layout of 1-tap filters: %s" % describe(f))
        else:
            taps = args.taps or 512
            if shutil.which("ncgen") is None:
                print("ncgen is missing (Debian: netcdf-bin): the sources read one HRIR pair "
                      "from a WAV instead of a SOFA set (the same matrix, the same work)")
                sofa_file = hrir_pair(work, taps)
            else:
                sofa_file = sofa_set(work, taps)

            def attempt(sources):
                try:
                    r = run_daemon(args, work, sofa_matrix(work, sofa_file, sources), sources,
                                   taps)
                except (RuntimeError, subprocess.TimeoutExpired, ValueError, KeyError) as e:
                    print("  %d sources: failed: %s" % (sources, str(e).splitlines()[0]))
                    return False
                r["sources"] = sources
                results["runs"].append(r)
                print("  %d sources: %s" % (sources, describe(r)))
                sys.stdout.flush()
                return r["late_periods"] == 0 and r["underruns"] == 0

            if not args.search:
                ok = True
                for round_index in range(args.rounds):
                    ok = attempt(args.sources) and ok
                    if args.floor:
                        floor_dir = os.path.join(work, "floor-%d" % round_index)
                        os.mkdir(floor_dir)
                        r = run_daemon(args, floor_dir,
                                       sofa_matrix(floor_dir, hrir_pair(floor_dir, 1),
                                                   args.sources),
                                       args.sources, 1)
                        r["sources"] = args.sources
                        r["floor"] = True
                        results["runs"].append(r)
                        print("  floor, %d sources of 1-tap filters: %s"
                              % (args.sources, describe(r)))
                        sys.stdout.flush()
                late = [r["late_periods"] for r in results["runs"] if not r.get("floor")]
                print("%s sofa: %d sources -> binaural, %d-tap HRIRs, %s engine, %d-frame "
                      "periods: %s late periods over %.0f s (target 0)"
                      % ("PASS" if ok else "FAIL", args.sources, taps, args.engine, args.period,
                         ", ".join(str(n) for n in late) or "-", args.seconds))
            else:
                good, bad = 0, 0
                n = args.sources
                while n <= args.max_sources and attempt(n):
                    good, n = n, n * 2
                bad = n if n <= args.max_sources else 0
                while bad and bad - good > max(1, good // 16):
                    mid = (good + bad) // 2
                    if attempt(mid):
                        good = mid
                    else:
                        bad = mid
                results["largest_sources"] = good
                ok = good > 0
                print("%s sofa search: largest source count with 0 late periods at %d-frame "
                      "periods, %s engine: %d%s"
                      % ("PASS" if ok else "FAIL", args.period, args.engine, good,
                         "" if bad else " (the largest tried)"))
    results["load_average_after"] = os.getloadavg()
    print("load average (1, 5, 15 min): before %s, after %s"
          % (" ".join("%.2f" % x for x in results["load_average_before"]),
             " ".join("%.2f" % x for x in results["load_average_after"])))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
            f.write("\n")
        print("wrote", args.json)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
