"""GPU against CPU on one machine (issue 39): the peers' workloads, ranks sharing the GPU, W4's time to AUC, and
the matrix size where the GPU starts to win. One prepared script for a lent GPU, within a time budget; it needs
cupy and a GPU, and without them says so and exits 2 (nothing it writes is a measurement until it has run on
one).

    python -m scripts.bench.gpu [--budget-s 540] [--parts workloads,shared,crossover,auc]
                                [--out scripts/results/bench-gpu.json] [--plot scripts/results/bench-gpu.png]

The parts, in this order, each started only with enough of the budget left (else recorded as skipped); the
JSON is rewritten after every part, so a run cut short keeps what it measured:
  workloads  W1-W4 at np 1: python -m mpinn.bench --device gpu (--graph auto: the step captured where the plan covers
             it; and again with --graph off, eager) against --device cpu (one rank, one BLAS thread:
             one CPU core), the same data, initial weights and batch order: samples/s, the speed-up against the
             issue's targets (W1 >= 20x, W2 >= 10x), and loss_final, which must agree (1e-3 relative: float32
             summed in another order)
  shared     W1 and W2 at np 2 on the one GPU (mpiexec -n 2 ... --device gpu: the ranks share it)
  crossover  (n x k) . (k x m) with the operands from the host and the product back, the GPU against one CPU
             core, at multiples of DT42's 120x30 . 30x20 (the seed found the GPU slower below it); the size where
             the GPU starts to win, and the PNG's first panel
  auc        W4's time to AUC at --w4-rows rows (default 3M; its text written once into --workdir): one epoch on
             the GPU beside one on the CPU, np 1 (scripts.bench.time_to_auc's runs); the PNG's second panel
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np

from scripts.bench.common import mpiexec

PARTS = ("workloads", "shared", "crossover", "auc")
DEVICE = "gpu"          # what the GPU side runs with (tests/entry/test_bench_gpu.py points it at the CPU to rehearse)
TARGETS = {"w1": 20.0, "w2": 10.0}          # GPU samples/s over one CPU core's, the issue's
NEEDS_S = {"workloads": 120, "shared": 60, "crossover": 20, "auc": 240}     # at least this much budget left to start


def say(msg):
    print("bench_gpu: " + msg, file=sys.stderr, flush=True)


def bench(workload, device, ranks, timeout, graph="auto"):
    """One python -m mpinn.bench run's record (the peers' format), or {"error": ...}; graph: its --graph."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "r.jsonl")
        cmd = [mpiexec(), "-n", str(ranks), sys.executable, "-m", "mpinn.bench", "--workload", workload,
               "--device", device, "--graph", graph, "--timing-steps", "0", "--out", out]
        say(" ".join(cmd[3:]))
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                               env=dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1"))
        except subprocess.TimeoutExpired:
            return {"error": "ran past %d s" % timeout}
        if r.returncode != 0 or not os.path.exists(out):
            return {"error": "exit %d: %s" % (r.returncode, (r.stderr or r.stdout)[-600:])}
        rec = json.loads(open(out).read().splitlines()[-1])
    keep = ("samples_per_s", "step_ms", "compute_ms", "comm_ms", "loss_initial", "loss_final", "phase_ms_rank0",
            "device", "comm", "variant")
    return {k: rec.get(k) for k in keep}


def part_workloads(rec, left, workloads):
    rows = rec["workloads"] = {}
    for w in workloads:
        cpu = bench(w, "cpu", 1, max(30, left() / 4))
        gpu = bench(w, DEVICE, 1, max(30, left() / 4))          # --graph auto: one captured graph a step where it can
        eager = bench(w, DEVICE, 1, max(30, left() / 4), graph="off")
        row = rows[w] = {"cpu": cpu, "gpu": gpu, "gpu_eager": eager}
        if "error" not in gpu and "error" not in eager:
            row["graph_over_eager"] = gpu["samples_per_s"] / eager["samples_per_s"]
        if "error" not in cpu and "error" not in gpu:
            row["speedup"] = gpu["samples_per_s"] / cpu["samples_per_s"]
            row["loss_final_rel_diff"] = abs(gpu["loss_final"] - cpu["loss_final"]) / abs(cpu["loss_final"])
            row["same_loss_final"] = row["loss_final_rel_diff"] < 1e-3
            if w in TARGETS:
                row["target"], row["target_met"] = TARGETS[w], row["speedup"] >= TARGETS[w]


def part_shared(rec, left, workloads):
    rec["shared"] = {w: bench(w, DEVICE, 2, max(30, left() / 2)) for w in workloads}


def timed(fn, sync, repeat, warmup=3):
    """Median seconds of fn(), the device drained before and after each run."""
    for _ in range(warmup):
        fn()
    sync()
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        sync()
        out.append(time.perf_counter() - t)
    return float(np.median(out))


def gpu_arrays():
    import cupy
    return cupy


def part_crossover(rec, left, scales):
    cupy = gpu_arrays()
    rng = np.random.default_rng(0)
    sync = cupy.cuda.get_current_stream().synchronize
    rows = rec["crossover"] = []
    for s in scales:
        n, k, m = (max(1, int(round(v * s))) for v in (120, 30, 20))
        a, b = rng.standard_normal((n, k)).astype(np.float32), rng.standard_normal((k, m)).astype(np.float32)
        t_cpu = timed(lambda: a @ b, lambda: None, 50)
        t_gpu = timed(lambda: cupy.asnumpy(cupy.asarray(a) @ cupy.asarray(b)), sync, 50)
        rows.append({"scale": s, "n": n, "k": k, "m": m, "cpu_ms": 1e3 * t_cpu, "gpu_ms": 1e3 * t_gpu})
        if left() < 5:
            break
    faster = [c for c in rows if c["gpu_ms"] < c["cpu_ms"]]
    rec["gpu_wins_from"] = faster[0] if faster else None


def part_auc(rec, left, args):
    """scripts.bench.time_to_auc's data and mpinn runs: one epoch at np 1 on each device, the curves' points."""
    from scripts.bench import time_to_auc as tta
    targs = argparse.Namespace(rows=args.w4_rows, test_rows=args.w4_test_rows, scale=100, seed=0, workdir=args.workdir,
                               points=8, timeout=int(max(60, left() / 2)))
    os.makedirs(args.workdir, exist_ok=True)
    train, test, truth = tta.make_data(targs)
    rec["auc"] = {"rows": args.w4_rows, "hidden_model_auc": tta.hidden_auc(test, truth), "points": []}
    for name, device in (("gpu", DEVICE), ("cpu", "cpu")):
        targs.timeout = int(max(60, left() / (2 if name == "gpu" else 1)))
        rec["auc"]["points"] += tta.run_mpinn(targs, train, test, 1, name, "--epochs 1 --device %s" % device)


def table(rec):
    lines = ["| workload | CPU samples/s (1 core) | GPU samples/s | speed-up (target) | loss_final CPU / GPU |",
             "|---|---|---|---|---|"]
    for w, row in rec.get("workloads", {}).items():
        cpu, gpu = row["cpu"], row["gpu"]
        if "speedup" not in row:
            lines.append("| %s | %s | %s | - | - |" % (w.upper(), cpu.get("error", ""), gpu.get("error", "")))
            continue
        target = " (%.0fx: %s)" % (row["target"], "met" if row["target_met"] else "NOT met") if "target" in row else ""
        lines.append("| %s | %.0f | %.0f | %.1fx%s | %.6f / %.6f%s |" % (
            w.upper(), cpu["samples_per_s"], gpu["samples_per_s"], row["speedup"], target, cpu["loss_final"],
            gpu["loss_final"], "" if row["same_loss_final"] else " DIFFER"))
    for w, row in rec.get("workloads", {}).items():
        if "graph_over_eager" in row:
            lines.append("%s on the GPU: %s %.0f samples/s against eager %.0f (%.2fx); loss_final %r / %r%s" % (
                w.upper(), row["gpu"]["variant"], row["gpu"]["samples_per_s"], row["gpu_eager"]["samples_per_s"],
                row["graph_over_eager"], row["gpu"]["loss_final"], row["gpu_eager"]["loss_final"],
                "" if row["gpu"]["loss_final"] == row["gpu_eager"]["loss_final"] else " (not the same bits: "
                "the graph's GEMMs are mpinn's own, the eager step's cuBLAS's)"))
    for w, r in rec.get("shared", {}).items():
        lines.append("%s at np 2 sharing the GPU: %s" % (
            w.upper(), r.get("error") or "%.0f samples/s, loss_final %.6f" % (r["samples_per_s"], r["loss_final"])))
    win = rec.get("gpu_wins_from")
    if "crossover" in rec:
        lines.append("GPU faster from: %s" % ("%(n)dx%(k)d . %(k)dx%(m)d" % win if win else "never in this range"))
    for p in rec.get("auc", {}).get("points", [])[-1:]:
        lines.append("W4 %d rows: last point %s" % (rec["auc"]["rows"], json.dumps(p)))
    lines += ["%s: skipped (%s)" % (k, v) for k, v in rec["skipped"].items()]
    return "\n".join(lines)


def plot(rec, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        say("no plot: matplotlib is not installed (pip install 'mpinn[plot]')")
        return
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    cross = rec.get("crossover", [])
    if cross:
        x = [c["n"] * c["k"] * c["m"] for c in cross]
        ax.loglog(x, [c["cpu_ms"] for c in cross], "o-", label="CPU (numpy, 1 thread)")
        ax.loglog(x, [c["gpu_ms"] for c in cross], "s-", label="GPU (cupy, copies included)")
        ax.axvline(120 * 30 * 20, color="grey", ls=":", label="DT42 120x30 . 30x20")
        ax.set_xlabel("multiply-adds (n k m)")
        ax.set_ylabel("ms per product")
        ax.legend()
    ax.set_title("crossover: %s" % rec.get("gpu", "?"))
    for device in ("cpu", "gpu"):
        pts = [p for p in rec.get("auc", {}).get("points", []) if p["system"] == "mpinn " + device]
        if pts:
            ax2.plot([p["seconds"] for p in pts], [p["auc"] for p in pts], "o-", label="mpinn np 1 %s" % device)
    ax2.set_xlabel("seconds")
    ax2.set_ylabel("test AUC")
    ax2.set_title("W4 time to AUC (%s rows)" % rec.get("auc", {}).get("rows", "-"))
    if rec.get("auc"):
        ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    say("plot written to %s" % path)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget-s", type=float, default=540, help="seconds the whole run may take (default 540)")
    p.add_argument("--parts", default=",".join(PARTS), help="which parts, of %s (default: all)" % ",".join(PARTS))
    p.add_argument("--workloads", default="w1,w2,w3,w4", help="workloads: which (default all four)")
    p.add_argument("--shared-workloads", default="w1,w2", help="shared: which, at np 2 on the GPU (default w1,w2)")
    p.add_argument("--scales", default="0.25,0.5,1,2,4,8,16,32",
                   help="crossover: multiples of the DT42 shapes 120x30 . 30x20")
    p.add_argument("--w4-rows", type=int, default=3000000, help="auc: W4 training rows (default 3M)")
    p.add_argument("--w4-test-rows", type=int, default=100000, help="auc: W4 test rows (default 100,000)")
    p.add_argument("--workdir", default="/tmp/mpinn-bench-gpu", help="auc: where W4's text and the runs' logs go")
    p.add_argument("--out", default="scripts/results/bench-gpu.json", help="JSON record")
    p.add_argument("--plot", default="scripts/results/bench-gpu.png", help="PNG: the crossover, W4's AUC curves")
    args = p.parse_args(argv)
    parts = [x for x in args.parts.split(",") if x]
    if set(parts) - set(PARTS):
        p.error("--parts: of %s" % ",".join(PARTS))

    from mpinn.device.backend import get_backend, gpu_probe
    count, why = gpu_probe()
    if not count:
        say("needs cupy and a GPU: %s" % why)
        return 2
    t0 = time.perf_counter()

    def left():
        return args.budget_s - (time.perf_counter() - t0)

    rec = {"host": platform.node(), "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "gpu": get_backend("cupy").describe(),
           "cpus": os.cpu_count(), "budget_s": args.budget_s, "skipped": {}}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    for part in parts:
        if left() < NEEDS_S[part]:
            rec["skipped"][part] = "%.0f s of the budget left, %d needed to start" % (left(), NEEDS_S[part])
        else:
            t = time.perf_counter()
            try:
                if part == "workloads":
                    part_workloads(rec, left, args.workloads.split(","))
                elif part == "shared":
                    part_shared(rec, left, args.shared_workloads.split(","))
                elif part == "crossover":
                    part_crossover(rec, left, [float(x) for x in args.scales.split(",")])
                else:
                    part_auc(rec, left, args)
            except (Exception, SystemExit) as e:   # noqa: BLE001 - one part's failure is recorded, the rest go on
                rec["skipped"][part] = "failed: %s: %s" % (type(e).__name__, e)
            rec.setdefault("part_seconds", {})[part] = round(time.perf_counter() - t, 1)
        with open(args.out, "w") as f:
            json.dump(rec, f, indent=1)
    print(table(rec))
    say("record written to %s" % args.out)
    plot(rec, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
