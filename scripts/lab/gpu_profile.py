"""Where a GPU step's time goes, for a lent GPU (one prepared run): the host's profile of mpinn.bench's steps
(cProfile, the whole process; the timed steps dominate), the cost of single cupy calls at W1's shapes, and
whether a CUDA graph of a dense step can be captured and replayed with cupy here.

    python -m scripts.lab.gpu_profile --out DIR [--workloads w1,w2,w4]

Writes DIR/report.txt (everything printed), DIR/WORKLOAD.prof (pstats, readable anywhere with pstats) and
DIR/micro.json. Each part is guarded: one that fails prints its traceback and the others still run."""
import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import time
import traceback

REPORT = []


def say(*a):
    line = " ".join(str(x) for x in a)
    REPORT.append(line)
    print(line, flush=True)


def profile_workload(w, out, device="gpu"):
    from mpinn.bench.cli import main as bench_main
    argv = ["--workload", w, "--device", device, "--timing-steps", "0", "--out", os.path.join(out, "bench.jsonl")]
    prof = cProfile.Profile()
    t = time.perf_counter()
    prof.enable()
    try:
        bench_main(argv)
    finally:
        prof.disable()
    say("== %s: %.1f s under cProfile" % (w, time.perf_counter() - t))
    prof.dump_stats(os.path.join(out, "%s.prof" % w))
    for key, n in (("tottime", 45), ("cumulative", 70)):
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats(key).print_stats(n)
        say(s.getvalue())


def timed(cp, fn, n=2000):
    fn()
    cp.cuda.get_current_stream().synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    host = (time.perf_counter() - t) / n * 1e6
    cp.cuda.get_current_stream().synchronize()
    wall = (time.perf_counter() - t) / n * 1e6
    return round(host, 2), round(wall, 2)


def micro(out):
    """Host microseconds a call (queueing only) and wall microseconds a call (to the device's end), at W1's shapes."""
    import cupy as cp
    a = cp.random.rand(256, 784, dtype=cp.float32)
    W = cp.random.rand(784, 256, dtype=cp.float32)
    z = cp.empty((256, 256), cp.float32)
    b = cp.random.rand(256, dtype=cp.float32)
    g = cp.empty(256, cp.float32)
    y = cp.random.randint(0, 10, 256)
    z10 = cp.random.rand(256, 10, dtype=cp.float32)
    rows = cp.arange(256)
    ids = cp.random.randint(0, 1 << 20, 256 * 26).astype(cp.int64)
    flat = cp.random.rand(270000, dtype=cp.float32)
    ek = cp.ElementwiseKernel("T x", "T y", "y = x > 0 ? x : 0", "mpinn_probe_relu")
    ev = cp.cuda.Event(disable_timing=False)
    cases = {
        "matmul out= (256x784 . 784x256)": lambda: cp.matmul(a, W, out=z),
        "matmul new (256x784 . 784x256)": lambda: a @ W,
        "z += b": lambda: z.__iadd__(b),
        "maximum(z, 0, out=z)": lambda: cp.maximum(z, 0, out=z),
        "ElementwiseKernel relu": lambda: ek(z, z),
        "sum(axis=0, out=)": lambda: cp.sum(z, axis=0, out=g),
        "z10[rows, y]": lambda: z10[rows, y],
        "where": lambda: cp.where(z10 >= 0, z10, 0),
        "exp": lambda: cp.exp(z10),
        "max(axis=1, keepdims)": lambda: z10.max(axis=1, keepdims=True),
        "arange(256)": lambda: cp.arange(256),
        "zeros_like(z10)": lambda: cp.zeros_like(z10),
        "float(flat.sum()) [host wait]": lambda: float(flat.sum()),
        "isfinite(flat).all() no wait": lambda: cp.isfinite(flat).all(),
        "flat -= 0.1*flat (axpy-like)": lambda: flat.__isub__(flat * 0.1),
        "unique(ids, inverse) [host wait]": lambda: cp.unique(ids, return_inverse=True),
        "argsort(ids)": lambda: cp.argsort(ids),
        "event record + done": lambda: (ev.record(), ev.done),
    }
    res = {}
    for name, fn in cases.items():
        try:
            res[name] = timed(cp, fn, 300 if "unique" in name or "argsort" in name else 2000)
        except Exception as e:      # noqa: BLE001
            res[name] = repr(e)
        say("micro %-40s host/wall us: %s" % (name, res[name]))
    return res


def graph_probe():
    """Capture forward + backward of a 784-256-256-10 MLP step (no host reads) into a CUDA graph with a private
    memory pool; replay it; compare with the eager step's result and time both."""
    import cupy as cp
    s = cp.cuda.Stream(non_blocking=True)
    rs = cp.random.RandomState(0)
    W = [rs.rand(784, 256, dtype=cp.float32) * .01, rs.rand(256, 256, dtype=cp.float32) * .01,
         rs.rand(256, 10, dtype=cp.float32) * .01]
    x = rs.rand(256, 784, dtype=cp.float32)
    G = [cp.empty_like(w) for w in W]

    def step():
        a1 = cp.maximum(x @ W[0], 0)
        a2 = cp.maximum(a1 @ W[1], 0)
        z = a2 @ W[2]
        e = cp.exp(z - z.max(axis=1, keepdims=True))
        d = e / e.sum(axis=1, keepdims=True)
        cp.matmul(a2.T, d, out=G[2])
        d2 = (d @ W[2].T) * (a2 > 0)
        cp.matmul(a1.T, d2, out=G[1])
        d1 = (d2 @ W[1].T) * (a1 > 0)
        cp.matmul(x.T, d1, out=G[0])
        for w, g in zip(W, G):
            w -= 0.01 * g

    snapshot = [w.copy() for w in W]
    with s:
        for _ in range(3):
            step()
        s.synchronize()
        eager = [w.copy() for w in W]
        n = 500
        t = time.perf_counter()
        for _ in range(n):
            step()
        s.synchronize()
        eager_us = (time.perf_counter() - t) / n * 1e6
    for w, v in zip(W, snapshot):
        w[...] = v
    pool = cp.cuda.MemoryPool()
    mode = getattr(cp.cuda.runtime, "streamCaptureModeRelaxed", 2)
    with s, cp.cuda.using_allocator(pool.malloc):
        step()                      # warm the private pool and cuBLAS, then put the weights back
        s.synchronize()
        for w, v in zip(W, snapshot):
            w[...] = v
        s.synchronize()
        s.begin_capture(mode)
        step()
        graph = s.end_capture()
        for _ in range(3):
            graph.launch(s)
        s.synchronize()
        same = all(bool(cp.array_equal(w, e)) for w, e in zip(W, eager))
        maxdiff = max(float(cp.abs(w - e).max()) for w, e in zip(W, eager))
        t = time.perf_counter()
        for _ in range(n):
            graph.launch(s)
        host_us = (time.perf_counter() - t) / n * 1e6
        s.synchronize()
        graph_us = (time.perf_counter() - t) / n * 1e6
    res = {"eager_step_us": round(eager_us, 1), "graph_step_us": round(graph_us, 1),
           "graph_launch_host_us": round(host_us, 1), "graph_equals_eager_bitwise": same, "max_abs_diff": maxdiff}
    say("graph probe:", json.dumps(res))
    return res


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--workloads", default="w1,w2,w4")
    p.add_argument("--device", default="gpu", help="cpu: a rehearsal of the profile part here")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    results = {}
    for name, fn in (("micro", lambda: micro(args.out)), ("graph", graph_probe)):
        try:
            results[name] = fn()
        except Exception:           # noqa: BLE001 - a lab probe: say what broke, go on
            say("== %s failed:\n%s" % (name, traceback.format_exc()))
    with open(os.path.join(args.out, "micro.json"), "w") as f:
        json.dump(results, f, indent=1)
    for w in args.workloads.split(","):
        try:
            profile_workload(w, args.out, args.device)
        except BaseException:       # noqa: BLE001 - SystemExit from the bench's main included
            say("== %s failed:\n%s" % (w, traceback.format_exc()))
    with open(os.path.join(args.out, "report.txt"), "w") as f:
        f.write("\n".join(REPORT) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
