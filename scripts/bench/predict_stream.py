"""Predicting a click log bigger than memory (issue 36): python -m mpinn.predict on W4 day files read a block at a
time (--stream on) against read whole (--stream off): wall seconds, peak memory and whether the predictions are the
same bytes, for one file and for more files, with labels and without.

    python -m scripts.bench.predict_stream --many 4

The data: the large set of scripts.bench.streaming (W4 text, --rows rows in --files day files under
--workdir/large, made once and reused; the first file, then the first --many files, are predicted); the model:
trained here on the first file's first 500,000 rows (np 1, one epoch). The files without labels are the same rows with the label field cut (made once). Output: a Markdown table, and
scripts/results/predict-stream-DATE.json."""
import argparse
import filecmp
import os
import re
import subprocess
import sys
import time

from scripts.bench.common import print_and_save, w4_day_files


def predict(model, data, out, stream):
    """One run of mpinn.predict: wall seconds, the peak resident set (MiB) and the metrics line."""
    cmd = [sys.executable, "-c", "import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
           "print('peak_kib', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(r.returncode)",
           sys.executable, "-m", "mpinn.predict", "--model", model, "--data", data, "--out", out, "--stream", stream]
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if r.returncode:
        raise SystemExit("failed: %s\n%s" % (" ".join(cmd), r.stderr[-3000:]))
    peak = int(re.search(r"peak_kib (\d+)", r.stdout).group(1)) / 1024.0
    line = next(x for x in r.stdout.splitlines() if re.match(r"\d+ rows", x))
    return {"stream": stream, "wall_s": wall, "peak_rss_mib": peak, "result": line}


def unlabelled(src, dst):
    """src's rows without the label field (the first), once."""
    if not os.path.exists(dst):
        with open(src, "rb") as f, open(dst + ".tmp", "wb") as g:
            for line in f:
                g.write(line.split(b"\t", 1)[1])
        os.replace(dst + ".tmp", dst)
    return dst


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=20_000_000, help="rows of the day files (default 20M)")
    p.add_argument("--files", type=int, default=8, help="files they are cut into (default 8)")
    p.add_argument("--many", type=int, default=4, help="the files predicted as one (default 4)")
    p.add_argument("--scale", type=int, default=100, help="W4's cardinality divisor (default 100)")
    p.add_argument("--workdir", default="/tmp/mpinn-streaming", help="where the data is written and reused")
    p.add_argument("--whole-up-to", type=int, default=1, help="files also predicted read whole (default 1)")
    a = p.parse_args(argv)
    days = w4_day_files(os.path.join(a.workdir, "large"), a.rows, a.files, a.scale)
    first = os.path.join(days, "day_0.tsv")
    model = os.path.join(a.workdir, "predict-model.npz")
    if not os.path.exists(model):
        head = os.path.join(a.workdir, "predict-head.tsv")
        with open(first, "rb") as f, open(head, "wb") as g:
            for i, line in zip(range(500_000), f):
                g.write(line)
        subprocess.run([sys.executable, "-m", "mpinn.train", "--data", head, "--epochs", "1", "--holdout", "0",
                        "--no-progress", "--model-out", model], check=True, capture_output=True)
    bare = os.path.join(a.workdir, "bare")
    os.makedirs(bare, exist_ok=True)
    runs, rows = [], []
    for k in sorted({1, a.many}):
        for labels in (True, False):
            files = [os.path.join(days, "day_%d.tsv" % i) for i in range(k)]
            if not labels:
                files = [unlabelled(f, os.path.join(bare, os.path.basename(f))) for f in files]
            data = files[0] if k == 1 else os.path.join(os.path.dirname(files[0]), "day_[0-%d].tsv" % (k - 1))
            got = {}
            for stream in (("on", "off") if k <= a.whole_up_to else ("on",)):
                out = os.path.join(a.workdir, "pred-%s.csv" % stream)
                rec = dict(predict(model, data, out, stream), files=k, labels=labels)
                got[stream] = out
                runs.append(rec)
            same = filecmp.cmp(got["on"], got["off"], shallow=False) if len(got) == 2 else None
            for rec in runs[-len(got):]:
                rec["same_bytes"] = same
                rows.append("| %d | %s | %s | %.1f | %.0f | %s | %s |" % (
                    k, "yes" if labels else "no", rec["stream"], rec["wall_s"], rec["peak_rss_mib"],
                    {None: "-", True: "yes", False: "NO"}[same], rec["result"]))
            for out in got.values():
                os.remove(out)
    table = "\n".join(["| files | labels | --stream | wall s | peak MiB | same bytes | result |",
                       "|---|---|---|---|---|---|---|"] + rows)
    path = print_and_save("predict-stream", table, {"rows": a.rows, "files": a.files, "runs": runs})
    print("records written to %s" % path)


if __name__ == "__main__":
    main()
