"""Hashing benchmark: mpinn's split and trick modes against FeatureHasher and the peers' methods, one run.

The input is exactly that of the peers' hash_bench.py: 1,000,000 rows of the W2 generator (n = 1M),
20 categorical features, value v of feature j the distinct Python str "c{j}={v}", each method in its
natural layout (prepared untimed): 20-tuples of str for FeatureHasher, 20 pyarrow StringArrays for the
peers' arrow method, 20 object arrays for their pandas method; mpinn is timed on both the str lists a
CSV reader gives and the arrow arrays the Parquet reader gives. Every method ends in a scipy CSR matrix.
mpinn's trick mode (no feature prefix: the tokens already carry it) is checked equal to the peers'
reference columns (common.w2_hashed_indices). Each timed run is repeated; the table gives medians.

    python -m scripts.bench.hashing                          # ~3 min; table + JSON
    python -m scripts.bench.hashing --prepare-rows 1000000,10000000   # + peak RSS of mpinn.prepare

Run it with a Python that has scikit-learn and pyarrow (pandas for the peers' factorize method):
the peers' venv does, with mpinn found from this checkout (run from the repository root).
"""
import argparse
import importlib.util
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np

from scripts import ROOT


def quiet_wait(C, limit_s, max_foreign=0.3):
    """Wait (up to limit_s) for a 2-second window in which other processes used < max_foreign cores."""
    t_end = time.perf_counter() + limit_s
    while True:
        lw = C.LoadWindow()
        lw.start()
        time.sleep(2.0)
        foreign = lw.summary(lw.stop())["foreign_cpu_cores"]
        if foreign < max_foreign or time.perf_counter() > t_end:
            return foreign


def timed(C, fn, data, repeats):
    times = []
    lw = C.LoadWindow()
    lw.start()
    for _ in range(repeats):
        t = time.perf_counter()
        X = fn(data)
        times.append(time.perf_counter() - t)
    load = lw.summary(lw.stop())
    return X, times, load


def peer_modules(folder):
    """The peers' common.py and hash_bench.py, loaded from their checkout (hash_bench imports common by name:
    it is registered under that name first)."""
    out = []
    for name in ("common", "hash_bench"):
        spec = importlib.util.spec_from_file_location(name, os.path.join(folder, name + ".py"))
        out.append(importlib.util.module_from_spec(spec))
        sys.modules[name] = out[-1]
        spec.loader.exec_module(out[-1])
    return out


def hashing_bench(args):
    C, HB = peer_modules(args.peers)
    import pyarrow as pa
    from mpinn.hashing import encode, fit_contract, make_contract

    n, F = args.rows, C.W2_F
    t = time.perf_counter()
    codes, _ = C.make_w2_codes(n)
    cols = HB.build_columns(codes)                          # 20 lists of distinct str (what csv gives)
    ref = C.w2_hashed_indices(codes, C.W2_LOG2D)
    rows = list(zip(*cols))
    acols = [pa.array(c, type=pa.string()) for c in cols]
    prep_s = time.perf_counter() - t
    features = ["c%d" % j for j in range(F)]
    trick = make_contract(features, C.W2_LOG2D, 0, prefix=False)
    t = time.perf_counter()
    split = fit_contract(features, cols, mode="split", k=4)     # cardinalities: untimed, as prepare's pass 1
    fit_s = time.perf_counter() - t

    methods = [("sklearn FeatureHasher", "20-tuples of str", HB.m_sklearn, rows, "sklearn"),
               ("peers arrow (dictionary_encode, xxh64 of uniques)", "20 pyarrow StringArrays", HB.m_arrow,
                acols, "peer")]
    try:
        import pandas  # noqa: F401
        methods.append(("peers factorize (pandas)", "20 object arrays", HB.m_factorize,
                        [np.array(c, dtype=object) for c in cols], "peer"))
    except ImportError:
        print("(pandas missing: the peers' factorize method is left out)", file=sys.stderr)
    for threads in (1, 2):
        tag = "" if threads == 1 else ", 2 threads"
        for mode, contract in (("trick", trick), ("split k=4", split)):
            methods.append(("mpinn %s%s" % (mode, tag), "20 lists of str", 
                            lambda d, c=contract, th=threads: encode(d, c, threads=th), cols, "mpinn"))
            methods.append(("mpinn %s%s" % (mode, tag), "20 pyarrow StringArrays",
                            lambda d, c=contract, th=threads: encode(d, c, threads=th), acols, "mpinn"))
    if args.only:
        methods = [m for m in methods if any(s in m[0] for s in args.only.split(","))]

    records = []
    foreign_before = quiet_wait(C, args.quiet_wait)
    for name, layout, fn, data, kind in methods:
        warm = [c[:20000] for c in data] if kind != "sklearn" else data[:20000]
        fn(warm)
        reps = args.sklearn_repeats if kind == "sklearn" else args.repeats
        # the machine is shared: a window disturbed by other processes is run again (as the peers' runner does)
        for attempt in range(args.attempts):
            quiet_wait(C, args.quiet_wait)
            X, times, load = timed(C, fn, data, reps)
            if load["foreign_cpu_cores"] <= args.max_foreign:
                break
        assert X.shape[0] == n
        if name.startswith("mpinn trick") or kind == "peer":
            assert np.array_equal(X.indices[:n * F].reshape(n, F), ref), name
            check = "indices equal to common.w2_hashed_indices"
        elif kind == "sklearn":
            assert int(round(float(X.sum()))) == n * F
            check = "total weight (MurmurHash3 columns)"
        else:
            assert X.nnz == n * F * 4 and np.all(np.diff(X.indptr) == F * 4)
            check = "4 columns per feature per row"
        med = float(np.median(times))
        rec = {"method": name, "layout": layout, "rows": n, "features": F, "n_columns": int(X.shape[1]),
               "repeats": reps, "attempts": attempt + 1, "times_s": [round(x, 4) for x in times], "seconds_median": med,
               "rows_per_s": n / med, "check": check, "load": load}
        records.append(rec)
        print("%-52s %-24s %10.0f rows/s  (median of %d: %.3f s; foreign cores %.2f)"
              % (name, layout, rec["rows_per_s"], reps, med, load["foreign_cpu_cores"]), flush=True)
        del X
    return {"rows": n, "features": F, "input_prep_s_untimed": prep_s, "split_fit_s_untimed": fit_s,
            "split_buckets": split["buckets"], "foreign_cores_before": foreign_before, "results": records}


def prepare_rss(rows_list, modes, workdir):
    """Peak RSS (ru_maxrss of the child) of python -m mpinn.prepare on the embedded click log."""
    out = []
    for mode in modes:
        for n in rows_list:
            path = os.path.join(workdir, "bench-%s-%d.mpinn" % (mode, n))
            cmd = [sys.executable, "-m", "mpinn.prepare", "--default-rows", str(n), "--hash-mode", mode,
                   "--out", path, "--quiet"]
            t = time.perf_counter()
            p = subprocess.Popen(cmd, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
            _, status, usage = os.wait4(p.pid, 0)
            wall = time.perf_counter() - t
            size = os.path.getsize(path) if os.path.exists(path) else 0
            if os.path.exists(path):
                os.unlink(path)
            rec = {"mode": mode, "rows": n, "exit": os.waitstatus_to_exitcode(status), "seconds": wall,
                   "rows_per_s": n / wall, "peak_rss_mb": usage.ru_maxrss / 1024, "file_mb": size / 1e6,
                   "cmd": " ".join(cmd[1:])}
            out.append(rec)
            print("prepare %-6s %10d rows: peak RSS %7.1f MB, %6.1f s (%.0f rows/s), file %.0f MB, exit %d"
                  % (mode, n, rec["peak_rss_mb"], wall, rec["rows_per_s"], rec["file_mb"], rec["exit"]), flush=True)
    return out


def print_table(result):
    recs = result.get("hashing", {}).get("results", [])
    if recs:
        base = {r["method"]: r["rows_per_s"] for r in recs}
        fh = base.get("sklearn FeatureHasher")
        peer = max((r["rows_per_s"] for r in recs if r["method"].startswith("peers")), default=None)
        print("\n| method | input layout | rows/s (median) | x FeatureHasher | x best peer | foreign cores |")
        print("|---|---|---|---|---|---|")
        for r in recs:
            print("| %s | %s | %s | %s | %s | %.2f |" % (
                r["method"], r["layout"], format(int(r["rows_per_s"]), ","),
                "%.1fx" % (r["rows_per_s"] / fh) if fh else "-", "%.2fx" % (r["rows_per_s"] / peer) if peer else "-",
                r["load"]["foreign_cpu_cores"]))
    for r in result.get("prepare", []):
        print("prepare %s %d rows: peak RSS %.1f MB" % (r["mode"], r["rows"], r["peak_rss_mb"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per method (median reported)")
    ap.add_argument("--sklearn-repeats", type=int, default=3)
    ap.add_argument("--peers", default=os.path.join(os.path.dirname(ROOT), "shared", "peers"),
                    help="the peers' directory (common.py, hash_bench.py)")
    ap.add_argument("--only", help="comma-separated substrings of method names to run")
    ap.add_argument("--no-hashing", action="store_true", help="skip the hashing table")
    ap.add_argument("--prepare-rows", default="", help="comma-separated row counts for the prepare RSS runs")
    ap.add_argument("--prepare-modes", default="split,trick")
    ap.add_argument("--workdir", default="/tmp", help="where prepare's files go (deleted after each run)")
    ap.add_argument("--quiet-wait", type=float, default=60,
                    help="seconds to wait for an idle machine before each method")
    ap.add_argument("--max-foreign", type=float, default=0.3,
                    help="a timed window where other processes used more cores than this is run again")
    ap.add_argument("--attempts", type=int, default=3, help="runs of a disturbed method at most")
    ap.add_argument("--json", default="bench-hashing.json", help="results written here")
    args = ap.parse_args()
    import numpy
    import scipy
    import xxhash
    result = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "host": platform.node(), "cpus": os.cpu_count(),
              "python": platform.python_version(),
              "versions": {"numpy": numpy.__version__, "scipy": scipy.__version__, "xxhash": xxhash.VERSION}}
    for mod in ("pyarrow", "sklearn", "pandas"):
        try:
            result["versions"][mod] = __import__(mod).__version__
        except ImportError:
            pass
    if not args.no_hashing:
        result["hashing"] = hashing_bench(args)
    if args.prepare_rows:
        rows = [int(x) for x in args.prepare_rows.split(",") if x]
        result["prepare"] = prepare_rss(rows, args.prepare_modes.split(","), args.workdir)
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
    print_table(result)
    print("results written to %s" % args.json)


if __name__ == "__main__":
    main()
