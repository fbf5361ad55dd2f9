"""GPU against CPU, one process: the peers' W1 and W2 training steps, and the matrix size where the
GPU starts to win once the copies are paid (the DT42 seed measured the GPU slower below about
120x30 . 30x20). Needs cupy and a GPU; without them it says so and exits 2.

    python -m scripts.bench.gpu [--steps 30] [--out scripts/results/bench-gpu.json] [--plot bench-gpu.png]

The CPU runs with one BLAS thread (mpinn.bench pins it: one rank per core, as the peers run). Each
GPU time includes the host-to-device copy of the batch and, for the crossover, the copy back."""
import argparse
import json
import os
import platform
import sys
import time

import numpy as np

from mpinn.backend import get_backend, gpu_probe, to_host
from mpinn.bench import WORKLOADS  # (pins BLAS to one thread before numpy's BLAS starts)
from mpinn.model import MLP
from mpinn.optim import create_optimizer


def timed(fn, backend, repeat, warmup=3):
    """Median seconds of fn() over `repeat` runs, the device drained before and after each."""
    for _ in range(warmup):
        fn()
    backend.synchronize()
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        backend.synchronize()
        out.append(time.perf_counter() - t)
    return float(np.median(out))


def workload_step(name, backend, steps):
    """Seconds per training step (batch copy in, forward, backward, SGD step) of a workload."""
    wl = WORKLOADS[name]
    data = wl.make()
    model = MLP(wl.spec, backend)
    model.set_params(wl.init())
    opt = create_optimizer("sgd", model.size, backend.xp, weight_slices=model.weight_slices)
    sparse_rows = bool(wl.spec.n_sparse)
    batches = [wl.rows(data, k * wl.batch, (k + 1) * wl.batch) for k in range(8)]
    state = {"k": 0}

    def step():
        b = batches[state["k"] % len(batches)]
        state["k"] += 1
        rows = model.loss_grad_(backend.batch_to_device(b), 1.0 / b.n, sparse_grad=sparse_rows)
        opt.step_(model.params, model.grads, rows, lr=wl.lr)

    return timed(step, backend, steps), wl.batch, wl.what


def matmul_roundtrip(n, k, m, backend, repeat):
    """(n x k) @ (k x m) with the operands coming from the host and the product going back."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, k)).astype(np.float32), rng.standard_normal((k, m)).astype(np.float32)
    xp = backend.xp

    def run():
        return to_host(xp.asarray(a) @ xp.asarray(b))

    return timed(run, backend, repeat)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30, help="timed steps per workload (median reported)")
    p.add_argument("--scales", default="0.25,0.5,1,2,4,8,16,32",
                   help="crossover: multiples of the DT42 shapes 120x30 . 30x20")
    p.add_argument("--out", default="scripts/results/bench-gpu.json", help="JSON record")
    p.add_argument("--plot", default="bench-gpu.png", help="PNG of the crossover (needs matplotlib)")
    args = p.parse_args(argv)

    count, why = gpu_probe()
    if not count:
        sys.stderr.write("bench_gpu: needs cupy and a GPU: %s\n" % why)
        return 2
    cpu, gpu = get_backend("numpy"), get_backend("cupy")
    rec = {"host": platform.node(), "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "gpu": gpu.describe(),
           "workloads": {}, "crossover": []}

    print("%-4s %-42s %12s %12s %8s" % ("", "workload", "CPU ms/step", "GPU ms/step", "speed-up"))
    for name in ("w1", "w2"):
        t_cpu, batch, what = workload_step(name, cpu, args.steps)
        t_gpu, _, _ = workload_step(name, gpu, args.steps)
        rec["workloads"][name] = {"what": what, "batch": batch, "cpu_ms": 1e3 * t_cpu, "gpu_ms": 1e3 * t_gpu,
                                  "cpu_samples_per_s": batch / t_cpu, "gpu_samples_per_s": batch / t_gpu}
        print("%-4s %-42s %12.3f %12.3f %7.2fx" % (name, what, 1e3 * t_cpu, 1e3 * t_gpu, t_cpu / t_gpu))

    print("\n%-24s %12s %12s %8s" % ("(n x k) . (k x m)", "CPU ms", "GPU ms", "GPU/CPU"))
    for s in (float(x) for x in args.scales.split(",")):
        n, k, m = (max(1, int(round(v * s))) for v in (120, 30, 20))
        t_cpu = matmul_roundtrip(n, k, m, cpu, 50)
        t_gpu = matmul_roundtrip(n, k, m, gpu, 50)
        rec["crossover"].append({"scale": s, "n": n, "k": k, "m": m, "cpu_ms": 1e3 * t_cpu, "gpu_ms": 1e3 * t_gpu})
        print("%-24s %12.4f %12.4f %8.2f" % ("%dx%d . %dx%d" % (n, k, k, m), 1e3 * t_cpu, 1e3 * t_gpu, t_gpu / t_cpu))
    faster = [c for c in rec["crossover"] if c["gpu_ms"] < c["cpu_ms"]]
    rec["gpu_wins_from"] = faster[0] if faster else None
    print("GPU faster from: %s" % ("%(n)dx%(k)d . %(k)dx%(m)d" % faster[0] if faster else "never in this range"))

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(rec, f, indent=1)
    print("record written to %s" % args.out)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no plot: matplotlib is not installed (pip install 'mpinn[plot]')")
        return 0
    x = [c["n"] * c["k"] * c["m"] for c in rec["crossover"]]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.loglog(x, [c["cpu_ms"] for c in rec["crossover"]], "o-", label="CPU (numpy, 1 thread)")
    ax.loglog(x, [c["gpu_ms"] for c in rec["crossover"]], "s-", label="GPU (cupy, copies included)")
    ax.axvline(120 * 30 * 20, color="grey", ls=":", label="DT42 120x30 . 30x20")
    ax.set_xlabel("multiply-adds (n k m)")
    ax.set_ylabel("ms per product")
    ax.set_title("GPU vs CPU crossover: %s" % rec["gpu"])
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.plot, dpi=120)
    print("plot written to %s" % args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
