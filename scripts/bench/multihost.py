"""mpinn across "hosts" that are network namespaces on this machine (scripts/lab/netns.py), links shaped to 10 GbE.

    python -m scripts.bench.multihost --probe                  # alpha and B of MPI collectives across 2 hosts; ~10 s
    python -m scripts.bench.multihost                          # 4 default configs at 2x2 and 4x1, 3 repeats; ~5 min
    python -m scripts.bench.multihost --layouts 2x2 --config node="--workload w2 --hashed-table sharded --shard-exchange node"
        (each --config replaces the defaults; scripts/results/multihost-DATE.jsonl is appended to, --out names another)
    python -m scripts.bench.multihost --summarize scripts/results/multihost-DATE.jsonl

The lab: one namespace per host, a veth into a shared bridge; MPICH (the wheel's mpiexec) starts the ranks
through scripts/lab/netns_ssh and they talk over ofi/tcp on each host's eth0 (ranks on one host use shared
memory). --shaped (default): a tbf of --rate (10gbit) on both directions of every host's link. Latency is
not shaped: netem is not in this kernel, so alpha is what TCP over a veth costs here (tens of us), well
below a real 10 GbE switch hop's. Every layout runs 4 ranks or fewer on this machine's cores: 2x2 and 4x1
are both 4 ranks on 2 cores (oversubscribed): compare configurations with each other, not with a cluster.

--probe: under 2 hosts x 1 rank, the median (of several calls, slowest rank) of MPI_Alltoallv (n bytes per
rank in total, split evenly over the P ranks, itself included: as scripts/bench/alltoallv.py), of
MPI_Allreduce (n bytes of float32) for n = 256 B .. 16 MiB, and of an MPI_Alltoall of P int64 counts; the
fit t = alpha + x / B, x the bytes that cross (n (P - 1) / P of an Alltoallv, 2 (P - 1) / P n of an Allreduce:
mpinn/bench/crossing.py; alpha: the smallest size's time; B: the least-squares slope), and m = 1..64 messages
of 256 B in flight to the other host (persistent requests, as scripts/bench/alltoallv.py): the slope is what
each further message of an Alltoallv costs on the link; the same at 2 hosts x 2 ranks (no in-flight).
Writes scripts/results/multihost-probe-DATE.json ("fits" at 2x1; "fits"."2x2" at 2x2).

Bench runs: for each layout HxR (H hosts, R ranks each), each --config NAME=ARGS (ARGS: any arguments of
python -m mpinn.bench, so new bench flags need no change here) and each repeat, `mpiexec -n H*R python -m
mpinn.bench ARGS --out TMP` in the lab, with every host's eth0 rx/tx bytes read before and after. Per run:
  bytes/step (eth0)  = sum over hosts of eth0 tx bytes during the run / (steps_total + timing_steps of the
                       bench's record: the warm-up is inside steps_total, the timing steps come after).
                       Includes setup (the initial parameters sent from rank 0, the sharded table's
                       rows), the final gather, the launcher's control traffic and TCP/IP headers.
  marginal bytes/step = (median eth0 tx of the full runs - eth0 tx of one shorter run of the same config,
                       --steps warmup + (steps - warmup) // 5) / the difference in steps_total: setup,
                       final gather, timing steps and launcher traffic cancel; what one training step sends.
The bench record's "exchange" object (its own count of inter-node messages and bytes per step), when the
bench writes one, is copied into the line. Lines go to scripts/results/multihost-DATE.jsonl (appended),
then a Markdown table of medians per (layout, config) is printed; --summarize FILE prints it again.
On a shared 2-core machine other processes distort the timings: before each run the script waits (up to
--quiet-wait s) for the machine to be idle, and a run during which others took over --max-foreign cores
is kept as role "noisy" (out of the table) and run again, up to --retries times. Measured on the idle
2-core VM: a W1/W2 run at the bench's default steps takes 5-10 s (setup ~3 s), 32 runs ~4-5 min.
"""
import argparse
import json
import os
import shlex
import signal
import statistics
import sys
import tempfile
import time

from scripts import RESULTS, ROOT
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

LATENCY = "not shaped: netem unavailable in this kernel; alpha is the measured TCP-over-veth latency"
DEFAULT_CONFIGS = [("w2-flat", "--workload w2 --hashed-table sharded --shard-exchange flat --hot-rows off"),
                   ("w2-replicated", "--workload w2 --hashed-table replicated"),
                   ("w1-mpi", "--workload w1 --comm mpi"),
                   ("w1-shm", "--workload w1 --comm shm")]
SOURCE = None


# ---------------------------------------------------------------- under mpiexec
def probe_worker(out_path):
    """Under mpiexec in the lab: mpinn.comm.timing's probe (the one mpinn.bench.netprobe runs on a cluster)."""
    from mpinn.comm.timing import probe_points, world
    res = probe_points(world())
    if world().Get_rank() == 0:
        with open(out_path, "w") as f:
            json.dump(res, f)


# ---------------------------------------------------------------- the lab
class Interrupted(Exception):
    pass


def _on_term(signum, frame):
    raise Interrupted("signal %d" % signum)


def open_lab(n_hosts, tmp, args):
    from scripts.lab.netns import Cluster
    c = Cluster(n_hosts, tmp, args.mpiexec)
    c.up()
    try:
        if args.shaped:
            c.shape(args.rate, args.burst)
    except BaseException:
        c.down()
        raise
    return c


def link_info(c, args):
    q = c.shaped
    return {"rate": args.rate if q else "unshaped",
            "qdisc": ("%s rate %s burst %s latency %s (queueing bound) at the root of both ends of every host's "
                      "veth: into and out of each host" % (q["qdisc"], q["rate"], q["burst"], q["latency"]))
            if q else "none (unshaped veths)",
            "latency": LATENCY}


def hostfile(c, ranks_per_host):
    path = os.path.join(c.out_dir, "hosts-%dx%d" % (len(c.hosts), ranks_per_host))
    with open(path, "w") as f:
        f.write("".join("%s:%d\n" % (h, ranks_per_host) for h in c.hosts))
    return path


def run_probe(args):
    from mpinn.bench.crossing import CONVENTION, probe_fits
    points, fits, link = {}, {}, None
    with tempfile.TemporaryDirectory() as tmp:
        c = open_lab(2, tmp, args)
        try:
            points["waited_for_quiet_s"], points["busy_cores_before"] = wait_quiet(args.quiet_wait)
            points["tcp_stream_Bps"] = c.tcp_rate()
            for per in (1, 2):
                out = os.path.join(tmp, "probe-%d.json" % per)
                job = c.mpich(2 * per, ["-m", "scripts.bench.multihost", "--probe-worker", out], hostfile(c, per),
                              limit_s=args.run_timeout, name="probe-%d" % per)
                rc = job.wait(args.run_timeout + 15)
                if rc != 0 or not os.path.exists(out):
                    raise RuntimeError("probe 2x%d failed (%s):\n%s%s" % (per, rc, job.stdout[-2000:], job.stderr[-3000:]))
                with open(out) as f:
                    points["2x%d" % per] = json.load(f)
                print("probe 2x%d: %.1f s" % (per, time.monotonic() - job.started), flush=True)
            link = dict(link_info(c, args), tc_s_qdisc_show=c.qdiscs())
        finally:
            c.down()
    for lay in ("2x1", "2x2"):
        fits[lay] = probe_fits(points[lay], int(lay.split("x")[1]))
    rec = {"date": time.strftime("%Y-%m-%d"), "link": link,
           "fits": dict(fits["2x1"], **{"2x2": fits["2x2"]}), "points": points,
           "sizes": "alltoallv: n bytes sent per rank in total, split evenly over the P ranks (itself included); "
                    "allreduce: n bytes of float32; alltoall_counts: P int64 per rank; in_flight (2x1): m messages "
                    "of 256 B in flight to the other host (median of 50); seconds, median of 20 calls (5 from "
                    "1 MiB), the slowest rank's",
           "convention": CONVENTION,
           "command": command(), "source": source()}
    path = args.out or os.path.join(RESULTS, "multihost-probe-%s.json" % rec["date"])
    with open(path, "w") as f:
        json.dump(rec, f, indent=1)
    print("\n| layout | collective | alpha us | GB/s crossing a rank's links | GB/s on a host's link |\n"
          "|---|---|---|---|---|")
    for lay in ("2x1", "2x2"):
        for coll in ("alltoallv", "allreduce"):
            f = fits[lay][coll]
            print("| %s | %s | %.1f | %.3f | %s |" % (lay, coll, f["alpha_s"] * 1e6, f["crossing_Bps"] / 1e9,
                                                     "%.3f" % (f["link_Bps"] / 1e9) if "link_Bps" in f else "-"))
        if "per_message_s" in fits[lay]["alltoallv"]:
            print("| %s | each further 256 B message in flight | %.2f | | |" % (
                lay, fits[lay]["alltoallv"]["per_message_s"] * 1e6))
        print("| %s | alltoall of P counts | %.1f | |" % (lay, fits[lay]["alltoall_counts_s"] * 1e6))
    print("TCP stream host 1 -> 2: %.2f Gbit/s; link: %s; latency %s\n%s" % (
        points["tcp_stream_Bps"] * 8e-9, link["qdisc"], LATENCY, path))


# ---------------------------------------------------------------- bench runs
def busy_cores(seconds=1.0):
    """Cores busy on this machine over `seconds` (/proc/stat)."""
    def sample():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + v[4]
    t0, i0 = sample()
    time.sleep(seconds)
    t1, i1 = sample()
    return (os.cpu_count() or 1) * (1 - (i1 - i0) / max(t1 - t0, 1))


def wait_quiet(limit_s, threshold=0.3):
    """Wait (up to limit_s) until other processes use under `threshold` cores: (seconds waited, busy cores)."""
    t = time.monotonic()
    busy = busy_cores()
    while busy > threshold and time.monotonic() - t < limit_s:
        time.sleep(2)
        busy = busy_cores()
    return round(time.monotonic() - t, 1), round(busy, 2)


def command():
    return "python -m scripts.bench.multihost " + shlex.join(sys.argv[1:])


def source():
    """The commit the measured mpinn comes from, and whether mpinn/ differs from it."""
    import subprocess
    git = lambda *a: subprocess.run(["git", "-C", ROOT] + list(a), capture_output=True, text=True).stdout.strip()  # noqa: E731
    return {"commit": git("rev-parse", "--short", "HEAD") or None, "mpinn_modified": bool(git("status", "--porcelain", "mpinn"))}


def one_run(c, layout, name, bench_args, args, tag):
    hosts, per = layout
    tmp_out = os.path.join(c.out_dir, "%s.jsonl" % tag)
    waited, busy = wait_quiet(args.quiet_wait)
    before = c.counters()
    job = c.mpich(hosts * per, ["-m", "mpinn.bench"] + bench_args + ["--out", tmp_out], hostfile(c, per),
                  limit_s=args.run_timeout, name=tag)
    rc = job.wait(args.run_timeout + 15)
    wall = time.monotonic() - job.started
    after = c.counters()
    eth0 = {h: {"rx": after[h][0] - before[h][0], "tx": after[h][1] - before[h][1]} for h in c.hosts}
    line = {"date": time.strftime("%Y-%m-%dT%H:%M:%S"), "layout": "%dx%d" % layout, "hosts": hosts,
            "ranks_per_host": per, "np": hosts * per, "config": name, "args": bench_args, "rc": rc, "source": SOURCE,
            "wall_s": round(wall, 2), "waited_for_quiet_s": waited, "busy_cores_before": busy, "link": link_info(c, args)["qdisc"], "eth0": eth0,
            "eth0_tx_bytes": sum(v["tx"] for v in eth0.values()),
            "eth0_rx_bytes": sum(v["rx"] for v in eth0.values())}
    recs = [json.loads(l) for l in open(tmp_out)] if os.path.exists(tmp_out) else []
    if rc != 0 or not recs:
        line["error"] = (job.stdout[-1500:] + job.stderr[-2500:]).strip()
        return line
    rec = recs[-1]
    for k in ("samples_per_s", "step_ms", "compute_ms", "comm_ms", "null_comm_step_ms", "steps_total",
              "warmup_steps", "measured_steps", "timing_steps", "reduce", "table", "comm", "setup_s", "load"):
        line[k] = rec.get(k)
    line["steps_run"] = rec["steps_total"] + (rec.get("timing_steps") or 0)
    line["eth0_bytes_per_step"] = line["eth0_tx_bytes"] / line["steps_run"]
    if "exchange" in rec:
        line["exchange"] = rec["exchange"]
    return line


def parse_layouts(text):
    out = []
    for item in text.split(","):
        h, r = item.lower().split("x")
        out.append((int(h), int(r)))
    return out


def run_bench(args):
    configs = [tuple(c.split("=", 1)) for c in args.config] if args.config else DEFAULT_CONFIGS
    global SOURCE
    SOURCE = source()
    path = args.out or os.path.join(RESULTS, "multihost-%s.jsonl" % time.strftime("%Y-%m-%d"))
    session = time.strftime("%Y-%m-%dT%H:%M:%S")
    lines = []

    def keep(line):
        line = dict(line, session=session, command=command())
        lines.append(line)
        with open(path, "a") as f:
            f.write(json.dumps(line) + "\n")
        err = " ERROR rc=%s: %s" % (line["rc"], line["error"][-600:]) if "error" in line else ""
        print("%s %-14s %-5s %6.1f s  %s samples/s  eth0 %.0f B/step%s" % (
            line["layout"], line["config"], line.get("role"), line["wall_s"],
            "%.0f" % line["samples_per_s"] if line.get("samples_per_s") else "-",
            line.get("eth0_bytes_per_step") or 0, err), flush=True)
        return line

    for layout in parse_layouts(args.layouts):
        with tempfile.TemporaryDirectory() as tmp:
            c = open_lab(layout[0], tmp, args)
            try:
                for rep in range(args.repeats):
                    for name, text in configs:
                        for attempt in range(args.retries + 1):
                            line = one_run(c, layout, name, shlex.split(text), args,
                                           "%s-%dx%d-%d-%d" % (name, layout[0], layout[1], rep, attempt))
                            foreign = (line.get("load") or {}).get("foreign_cpu_cores") or 0
                            noisy = foreign > args.max_foreign and attempt < args.retries
                            keep(dict(line, role="noisy" if noisy else "full", repeat=rep, attempt=attempt))
                            if not noisy:
                                break
                if args.marginal:
                    for name, text in configs:
                        full = [l for l in lines if l["config"] == name and l["layout"] == "%dx%d" % layout
                                and l.get("steps_total")]
                        if not full:
                            continue
                        s, w = full[0]["steps_total"], full[0]["warmup_steps"]
                        short = shlex.split(text) + ["--steps", str(w + max((s - w) // 5, 1)), "--warmup", str(w)]
                        keep(dict(one_run(c, layout, name, short, args, "%s-%dx%d-short" % (name, *layout)),
                                  role="short"))
                qd = c.qdiscs()
            finally:
                c.down()
        print("qdiscs after layout %dx%d:\n%s" % (layout + (qd,)), flush=True)
    print("\n" + table(lines) + "\n" + path)


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def table(lines):
    """Markdown table of medians over the full runs per (layout, config)."""
    groups = {}
    for l in lines:
        groups.setdefault((l["layout"], l["config"]), []).append(l)
    out = ["| layout | config | runs | samples/s | step ms | comm ms | eth0 bytes/step (whole run) | "
           "eth0 bytes/step (marginal) | bench: inter-node msgs/step | bench: inter-node bytes/step | wall s | "
           "foreign cores |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    fmt = lambda v, f="%.0f": "-" if v is None else f % v     # noqa: E731
    for (layout, name), ls in groups.items():
        full = [l for l in ls if l.get("role", "full") == "full" and "error" not in l]
        short = [l for l in ls if l.get("role") == "short" and "error" not in l]
        marginal = None
        if full and short:
            ds = full[0]["steps_total"] - short[-1]["steps_total"]
            if ds > 0:
                marginal = (median(l["eth0_tx_bytes"] for l in full) - short[-1]["eth0_tx_bytes"]) / ds
        ex = [l.get("exchange") or {} for l in full]
        failed = len([l for l in ls if "error" in l])
        out.append("| %s | %s | %d%s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            layout, name, len(full), " (+%d failed)" % failed if failed else "",
            fmt(median(l["samples_per_s"] for l in full)), fmt(median(l["step_ms"] for l in full), "%.2f"),
            fmt(median(l["comm_ms"] for l in full), "%.2f"), fmt(median(l["eth0_bytes_per_step"] for l in full)),
            fmt(marginal), fmt(median(e.get("inter_node_messages_per_step") for e in ex), "%.1f"),
            fmt(median(e.get("inter_node_bytes_per_step") for e in ex)), fmt(median(l["wall_s"] for l in full), "%.1f"),
            fmt(median((l.get("load") or {}).get("foreign_cpu_cores") for l in full), "%.2f")))
    out.append("medians over the full runs; eth0 bytes/step: all hosts' eth0 tx during the run / (steps_total + "
               "timing_steps); marginal: (median full-run tx - one shorter run's tx) / the difference in steps; "
               "foreign cores: CPU other processes took during the timed window (the bench's load.foreign_cpu_cores)")
    return "\n".join(out)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--probe", action="store_true", help="time MPI collectives across 2 hosts and fit alpha, B")
    p.add_argument("--probe-worker", metavar="OUT", help=argparse.SUPPRESS)
    p.add_argument("--layouts", default="2x2,4x1", help="HOSTSxRANKS_PER_HOST, comma-separated (default 2x2,4x1)")
    p.add_argument("--repeats", type=int, default=3, help="full runs per (layout, config) (default 3)")
    p.add_argument("--config", action="append", metavar="NAME=ARGS",
                   help="a configuration: NAME=\"python -m mpinn.bench arguments\" (repeatable; default: %s)"
                   % "; ".join("%s=%r" % c for c in DEFAULT_CONFIGS))
    p.add_argument("--marginal", action=argparse.BooleanOptionalAction, default=True,
                   help="one shorter run per (layout, config) for the marginal bytes/step (default on)")
    p.add_argument("--shaped", action=argparse.BooleanOptionalAction, default=True,
                   help="tbf on every host's link, both directions (default on)")
    p.add_argument("--rate", default="10gbit", help="the tbf rate (default 10gbit)")
    p.add_argument("--burst", default="256kb",
                   help="the tbf burst (default 256kb: 210 us at 10 Gbit/s; a TCP stream still gets 9.5 Gbit/s, "
                        "while a 1mb burst let messages under 1 MB through at the veth's unshaped speed)")
    p.add_argument("--run-timeout", type=int, default=180, help="seconds before a launcher is killed (default 180)")
    p.add_argument("--quiet-wait", type=float, default=60,
                   help="before each run (and the probe), wait up to this many seconds for the machine to be "
                        "idle (under 0.3 cores busy); 0: don't (default 60)")
    p.add_argument("--max-foreign", type=float, default=0.25,
                   help="a run during which other processes took more CPU than this (cores, the bench's "
                        "load.foreign_cpu_cores) is kept as role 'noisy', left out of the table, and run again "
                        "(up to --retries times; the last attempt counts whatever its load) (default 0.25)")
    p.add_argument("--retries", type=int, default=2, help="see --max-foreign (default 2)")
    p.add_argument("--out", help="results file (default scripts/results/multihost[-probe]-DATE.json[l])")
    p.add_argument("--summarize", metavar="FILE", help="print the table of a results JSONL again, and exit")
    args = p.parse_args()
    if args.probe_worker:
        return probe_worker(args.probe_worker)
    if args.summarize:
        with open(args.summarize) as f:
            print(table([json.loads(l) for l in f if l.strip()]))
        return 0
    from scripts.lab.netns import default_mpiexec, remove_stale, skip_reason
    args.mpiexec = default_mpiexec()
    reason = skip_reason(args.mpiexec)
    if reason:
        print("cannot build the lab: " + reason, file=sys.stderr)
        return 2
    remove_stale()
    os.makedirs(RESULTS, exist_ok=True)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):    # SIGINT too: a background job starts with it ignored
        signal.signal(sig, _on_term)
    try:
        run_probe(args) if args.probe else run_bench(args)
    except (KeyboardInterrupt, Interrupted) as e:
        print("interrupted (%s): the lab is torn down" % (e or "Ctrl-C"), file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
