"""Scoring latency from Python (issue 64): mpinn.api.predict(model_path, rows), which reads the model file at every
call, against a Predictor loaded once, for 1 row and for 1,000 rows: p50 and p99 over many calls.

    python -m scripts.bench.predictor_latency

The model: the embedded click log's default model (python -m mpinn.train --epochs 1, trained here once in a
temporary directory, or --model); the rows: its first held-out rows, in memory (mpinn.data Rows), the same for both. Output: a Markdown table, and
scripts/results/predictor-latency-DATE.json."""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from scripts.bench.common import print_and_save


def timings(fn, calls, warm=3):
    """Seconds of each of `calls` calls of fn() (after `warm` untimed ones)."""
    for _ in range(warm):
        fn()
    out = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return np.array(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="a model file of the embedded click log (default: trained here, one epoch)")
    p.add_argument("--one-calls", type=int, default=500, help="calls scoring one row (default 500)")
    p.add_argument("--batch-calls", type=int, default=100, help="calls scoring 1,000 rows (default 100)")
    a = p.parse_args(argv)
    import mpinn.api as mp  # start-up: --help answers without numpy's and mpinn's imports
    from mpinn.inference.load import load_for_model  # start-up: as above
    with tempfile.TemporaryDirectory() as d:
        model = a.model
        t = time.perf_counter()
        if model is None:
            model = os.path.join(d, "clicks.npz")
            subprocess.run([sys.executable, "-m", "mpinn.train", "--epochs", "1", "--no-progress", "--quiet",
                            "--model-out", model], check=True, cwd=d)
        train_s = time.perf_counter() - t
        size = os.path.getsize(model)
        t = time.perf_counter()
        predictor = mp.Predictor(model)
        load_s = time.perf_counter() - t
        valid = load_for_model(predictor.meta, None)       # the held-out rows, read as predict reads them
        sets = {1: valid.subset(np.arange(1)), 1000: valid.subset(np.arange(1000))}
        for rows in sets.values():      # the same bits either way
            assert np.array_equal(mp.predict(model, rows)[0], predictor.predict(rows))
        records, table = [], ["| rows | calls | `mpinn.api.predict` p50 | p99 | `Predictor.predict` p50 | p99 | "
                              "speed-up (p50) |", "| --- | --- | --- | --- | --- | --- | --- |"]
        for n, calls in ((1, a.one_calls), (1000, a.batch_calls)):
            rows = sets[n]
            api = timings(lambda: mp.predict(model, rows), calls)
            held = timings(lambda: predictor.predict(rows), calls)
            rec = {"rows": n, "calls": calls}
            for name, ts in (("api_predict", api), ("predictor", held)):
                rec[name] = {"p50_ms": 1e3 * float(np.percentile(ts, 50)), "p99_ms": 1e3 * float(np.percentile(ts, 99)),
                             "mean_ms": 1e3 * float(ts.mean())}
            records.append(rec)
            table.append("| %s | %d | %.2f ms | %.2f ms | %.3f ms | %.3f ms | %.0fx |" % (
                format(n, ","), calls, rec["api_predict"]["p50_ms"], rec["api_predict"]["p99_ms"],
                rec["predictor"]["p50_ms"], rec["predictor"]["p99_ms"],
                rec["api_predict"]["p50_ms"] / rec["predictor"]["p50_ms"]))
    table = "\n".join(table)
    print_and_save("predictor-latency", table, {
        "records": records, "model_bytes": size, "train_s": train_s, "predictor_load_s": load_s,
        "n_sparse": int(predictor.model.spec.n_sparse), "hidden": list(predictor.model.spec.hidden),
        "cpus": os.cpu_count(), "threads": os.environ.get("OMP_NUM_THREADS")})


if __name__ == "__main__":
    main()
