"""Scoring latency from Python (issue 64): mpinn.api.predict(model_path, rows), which reads the model file at every
call, against a Predictor loaded once and against the model exported to ONNX (python -m mpinn.export) in ONNX
Runtime, for 1 row and for 1,000 rows: p50 and p99 over many calls.

    python -m scripts.bench.predictor_latency

The model: the embedded click log's default model (python -m mpinn.train --epochs 1, trained here once in a
temporary directory, or --model); the rows: its first held-out rows, in memory (mpinn.data Rows), the same for all.
ONNX Runtime is timed on the graph's inputs made from those rows (their hashed ids and raw numbers: what a client
that hashed them gives it; session.run, one thread and its default), and through OnnxPredictor.predict(rows)
(the ids taken from the rows' CSR first). Output: a Markdown table, and scripts/results/serving-latency-DATE.json
(with the model file's and the .onnx file's sizes)."""
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
        onnx_path = os.path.join(d, "clicks.onnx")
        mp.export(model, onnx_path)
        sessions = {"ort1": mp.OnnxPredictor(onnx_path, threads=1), "ort": mp.OnnxPredictor(onnx_path)}
        for rows in sets.values():      # ONNX Runtime's predictions: mpinn's to 1e-6
            assert np.allclose(sessions["ort"].predict(rows), predictor.predict(rows), rtol=0, atol=1e-6)
        arms = (("api_predict", "`mpinn.api.predict`"), ("predictor", "`Predictor.predict`"),
                ("ort1", "ONNX Runtime, 1 thread"), ("ort", "ONNX Runtime, %d threads" % os.cpu_count()),
                ("onnx_predictor", "`OnnxPredictor.predict`"))
        records, table = [], ["| rows | calls | " + " | ".join("%s p50 | p99" % name for _, name in arms) + " |",
                              "| --- | --- |" + " --- | --- |" * len(arms)]
        for n, calls in ((1, a.one_calls), (1000, a.batch_calls)):
            rows = sets[n]
            feeds = sessions["ort"].feeds(rows, 0, n)       # the graph's inputs: hashed ids, raw numbers
            fns = {"api_predict": lambda: mp.predict(model, rows), "predictor": lambda: predictor.predict(rows),
                   "ort1": lambda: sessions["ort1"].run(**feeds), "ort": lambda: sessions["ort"].run(**feeds),
                   "onnx_predictor": lambda: sessions["ort1"].predict(rows)}
            rec = {"rows": n, "calls": calls}
            for name, _ in arms:
                ts = timings(fns[name], calls)
                rec[name] = {"p50_ms": 1e3 * float(np.percentile(ts, 50)), "p99_ms": 1e3 * float(np.percentile(ts, 99)),
                             "mean_ms": 1e3 * float(ts.mean())}
            records.append(rec)
            table.append("| %s | %d | " % (format(n, ","), calls) + " | ".join(
                "%.3f ms | %.3f ms" % (rec[name]["p50_ms"], rec[name]["p99_ms"]) for name, _ in arms) + " |")
        onnx_size = os.path.getsize(onnx_path)
    table = "\n".join(table) + "\n\nmodel file %.1f MB, ONNX model %.1f MB" % (size / 1e6, onnx_size / 1e6)
    print_and_save("serving-latency", table, {
        "records": records, "model_bytes": size, "onnx_bytes": onnx_size, "train_s": train_s, "predictor_load_s": load_s,
        "n_sparse": int(predictor.model.spec.n_sparse), "hidden": list(predictor.model.spec.hidden),
        "cpus": os.cpu_count(), "threads": os.environ.get("OMP_NUM_THREADS")})


if __name__ == "__main__":
    main()
