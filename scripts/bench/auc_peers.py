"""One peer system (LightGBM, Vowpal Wabbit or a logistic regression) on a Criteo-format click log, its test
AUC recorded at several points of its training; run by scripts/bench/time_to_auc.py inside the peers' own venv,
by its path (it imports nothing from this repository, which that venv does not hold):

    python scripts/bench/auc_peers.py --system lightgbm --train train.tsv --test test.tsv --out points.jsonl

TRAIN and TEST: label, I1..I13 (integers, empty = missing), C1..C26 (8-hex-digit strings, empty = missing),
tab-separated, no header; gzip when the name ends in .gz. The clock starts with the process and counts
reading, parsing and encoding the training file and the training itself; it stops while the test rows are
read, encoded and scored (roc_auc_score), so "seconds" is training wall time. One JSON line per point is
appended to OUT when the run has finished (a failed run writes nothing and exits 1 with one line):
{"system", "np": 1, "threads", "seconds", "auc", "rows_seen" (training rows processed, counting passes),
"point", "params"}. A line per point goes to stderr as it is measured.

Settings (the tools' usual ones for click logs; all in each record's "params"):
  lightgbm  binary objective, num_leaves 127, learning_rate 0.1, 300 rounds (--rounds), min_data_in_leaf 100,
            feature_fraction 0.8, max_bin 255, num_threads = --threads; I1..I13 as numbers (NaN missing);
            C1..C26 as native categorical features: each value seen at least 10 times in the training rows
            (--min-count) gets a code by frequency, rarer and unseen values share one "other" code, missing
            stays missing; LightGBM's categorical guards at their defaults (cat_smooth 10, cat_l2 10,
            max_cat_threshold 32, min_data_per_group 100). --cat-encoding count uses each value's training
            count as a number instead. A point every rounds/15 rounds (scored with the first k trees).
  vw        vowpalwabbit (pyvw) with its native text parser: the TSV is converted to VW text (timed), namespace
            i: I<k>:sign(x)*log1p(|x|), namespace c: C<k>=<hex>; --loss_function logistic -b 23
            --holdout_off, learning rate and adaptive/normalized/invariant updates at VW's defaults, 3 passes
            (--passes) over VW cache files. The first pass runs in 4 segments (1/8, 1/8, 1/4, 1/2 of the
            rows), each a Workspace that loads the previous model (-i, which carries the adaptive state, and
            gives the same weights as one run with --passes), learns from its file with VW's own parser and
            saves (-f); a point after each segment, then after each pass. VW learns on one thread.
  logreg    scikit-learn: the file read in chunks of 100,000 rows (pandas); C<k>=<hex> tokens (missing as
            C<k>=) hashed by FeatureHasher(2**20, alternate_sign=False), I1..I13 as sign(x)*log1p(|x|)
            standardised with the first chunk's mean and std, missing set to 0 and flagged by 13 0/1 columns;
            SGDClassifier(loss="log_loss", penalty="l2", alpha=1e-6, learning_rate="optimal") by partial_fit,
            one point per chunk in the first epoch, then one per epoch, 3 epochs (--passes). One thread.
"""
import time

T0 = time.perf_counter()        # the clock starts before the libraries are imported: importing them counts

import argparse  # noqa: E402
import contextlib  # noqa: E402
import gzip  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

N_INT, N_CAT = 13, 26
INTS = ["I%d" % k for k in range(1, N_INT + 1)]
CATS = ["C%d" % k for k in range(1, N_CAT + 1)]
NAMES = ["label"] + INTS + CATS


class Clock:
    """Training wall seconds since T0, less the time spent inside pause() (evaluation)."""

    def __init__(self):
        self.paused = 0.0

    def seconds(self):
        return time.perf_counter() - T0 - self.paused

    @contextlib.contextmanager
    def pause(self):
        t = time.perf_counter()
        try:
            yield
        finally:
            self.paused += time.perf_counter() - t


class Points:
    """Collects the records; each is told on stderr as it is measured, all are written at the end."""

    def __init__(self, system, threads, params):
        self.system, self.threads, self.params, self.records = system, threads, params, []

    def add(self, seconds, auc, rows_seen, point):
        r = {"system": self.system, "np": 1, "threads": self.threads, "seconds": round(seconds, 4),
             "auc": round(float(auc), 6), "rows_seen": int(rows_seen), "point": point, "params": self.params}
        self.records.append(r)
        print("%s: %-16s %8.2f s  AUC %.4f  (%d rows seen)" % (self.system, point, seconds, auc, rows_seen),
              file=sys.stderr, flush=True)

    def write(self, path):
        with open(path, "a") as f:
            f.write("".join(json.dumps(r) + "\n" for r in self.records))


def open_text(path):
    return gzip.open(path, "rt") if path.endswith(".gz") else open(path)


def count_lines(path):
    n = 0
    with (gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")) as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            n += block.count(b"\n")
    return n


def read_frame(path, cat_dtype, chunksize=None):
    """pandas.read_csv of a Criteo file: the label as int8, I1..I13 float32 (NaN missing), C1..C26 as
    cat_dtype with missing as NaN."""
    import pandas as pd
    dtype = {"label": "int8", **{c: "float32" for c in INTS}, **{c: cat_dtype for c in CATS}}
    return pd.read_csv(path, sep="\t", header=None, names=NAMES, dtype=dtype, keep_default_na=False,
                       na_values=[""], chunksize=chunksize, engine="c")


def signed_log(x):
    import numpy as np
    return np.sign(x) * np.log1p(np.abs(x))


# ---------------------------------------------------------------------------------------------- LightGBM
def encode_cats(train_col, test_col, min_count, how):
    """Codes for one categorical column (pandas category Series) of the training and the test rows."""
    import numpy as np
    codes = train_col.cat.codes.to_numpy()
    counts = np.bincount(codes[codes >= 0], minlength=len(train_col.cat.categories))
    idx = train_col.cat.categories.get_indexer(test_col.cat.categories)   # -1: a value unseen in training
    if how == "count":
        lut, lut_test = counts.astype(np.float32), np.where(idx >= 0, counts[idx], 0).astype(np.float32)
    else:
        order = np.argsort(-counts, kind="stable")
        kept = int((counts >= min_count).sum())          # the kept values come first in `order`
        lut = np.full(len(counts), kept, dtype=np.float32)
        lut[order[:kept]] = np.arange(kept, dtype=np.float32)
        lut_test = np.where(idx >= 0, lut[idx], kept).astype(np.float32)

    def apply(col, table):
        c = col.cat.codes.to_numpy()
        return np.where(c >= 0, table[np.maximum(c, 0)] if len(table) else 0, np.nan).astype(np.float32)
    return apply(train_col, lut), (lambda: apply(test_col, lut_test))


def run_lightgbm(args, clock, threads):
    import lightgbm as lgb
    import numpy as np
    from sklearn.metrics import roc_auc_score
    params = {"objective": "binary", "num_leaves": 127, "learning_rate": 0.1, "min_data_in_leaf": 100,
              "feature_fraction": 0.8, "max_bin": 255, "num_threads": threads, "seed": args.seed,
              "deterministic": True, "verbose": -1, "cat_smooth": 10.0, "cat_l2": 10.0, "max_cat_threshold": 32,
              "min_data_per_group": 100}
    info = {"library": "lightgbm " + lgb.__version__, "rounds": args.rounds, "cat_encoding": args.cat_encoding,
            "min_count": args.min_count, **params}
    points = Points("lightgbm", threads, info)
    train = read_frame(args.train, "category")
    with clock.pause():
        test = read_frame(args.test, "category")
        y_test = test["label"].to_numpy()
    n = len(train)
    x = np.empty((n, N_INT + N_CAT), dtype=np.float32)
    x[:, :N_INT] = train[INTS].to_numpy(dtype=np.float32)
    test_cols = []
    for j, c in enumerate(CATS):
        x[:, N_INT + j], later = encode_cats(train[c], test[c], args.min_count, args.cat_encoding)
        test_cols.append(later)
    y = train["label"].to_numpy()
    del train
    with clock.pause():
        x_test = np.empty((len(test), N_INT + N_CAT), dtype=np.float32)
        x_test[:, :N_INT] = test[INTS].to_numpy(dtype=np.float32)
        for j, later in enumerate(test_cols):
            x_test[:, N_INT + j] = later()
        del test
    cats = list(range(N_INT, N_INT + N_CAT)) if args.cat_encoding == "native" else []
    data = lgb.Dataset(x, label=y, feature_name=INTS + CATS, categorical_feature=cats, free_raw_data=True)
    every = max(1, args.rounds // 15)

    def evaluate(env):
        k = env.iteration + 1
        if k % every == 0 or k == env.end_iteration:
            seconds = clock.seconds()
            with clock.pause():
                auc = roc_auc_score(y_test, env.model.predict(x_test, num_iteration=k))
            points.add(seconds, auc, n, "round %d" % k)
    lgb.train(params, data, num_boost_round=args.rounds, callbacks=[evaluate])
    return points


# ----------------------------------------------------------------------------------------------- VW
def to_vw(fields):
    """One TSV row (split) as a VW text line: label 1/-1, namespace i (log counts), namespace c (tokens)."""
    ints = " ".join("I%d:%.5g" % (k, math.copysign(math.log1p(abs(int(v))), int(v)))
                    for k, v in enumerate(fields[1:14], 1) if v and v != "0")
    cats = " ".join("C%d=%s" % (k, v) for k, v in enumerate(fields[14:40], 1) if v)
    return "%s |i %s |c %s\n" % ("1" if fields[0] == "1" else "-1", ints, cats)


def convert_rows(src, dst, n):
    """The next n rows of the open TSV src, as VW text in file dst; returns the rows written."""
    done, buf = 0, []
    with open(dst, "w") as out:
        for line in src:
            buf.append(to_vw(line.rstrip("\n").split("\t")))
            done += 1
            if len(buf) == 20000 or done == n:
                out.write("".join(buf))
                buf = []
            if done == n:
                break
    return done


def run_vw(args, clock, threads):
    import numpy as np
    import vowpalwabbit
    from sklearn.metrics import roc_auc_score
    from vowpalwabbit import pyvw
    flags = "--loss_function logistic -b %d --holdout_off --quiet" % args.bits
    info = {"library": "vowpalwabbit " + vowpalwabbit.__version__, "flags": flags, "passes": args.passes,
            "namespaces": "i: I<k>:sign(x)*log1p(|x|); c: C<k>=<hex>", "parser": "native (-d), VW cache after "
            "the first pass", "first_pass_segments": [0.125, 0.125, 0.25, 0.5], "threads_used": 1}
    points = Points("vw", threads, info)
    tmp = tempfile.mkdtemp(prefix="auc-vw-", dir=args.tmpdir)
    n = count_lines(args.train)
    ends = sorted({max(1, round(n * f)) for f in (0.125, 0.25, 0.5)} | {n})
    seg_rows = [b - a for a, b in zip([0] + ends[:-1], ends)]
    with clock.pause():
        with open_text(args.test) as f:
            test_lines = [to_vw(line.rstrip("\n").split("\t")) for line in f]
        y_test = np.array([line.startswith("1 ") for line in test_lines])
        test_lines = [line[line.index(" "):] for line in test_lines]     # without the label

    def evaluate(ws):
        with clock.pause():
            return roc_auc_score(y_test, np.array([ws.predict(line) for line in test_lines]))

    model, seen = None, 0
    with open_text(args.train) as src:
        for p in range(args.passes):
            for s, rows in enumerate(seg_rows):
                data = os.path.join(tmp, "seg%d.vw" % s)
                if p == 0:
                    rows = convert_rows(src, data, rows)
                out = os.path.join(tmp, "model%d.vw" % (p * len(seg_rows) + s))
                load = "-i %s" % model if model else ""
                ws = pyvw.Workspace("-d %s --cache_file %s.cache %s -f %s %s" % (data, data, load, out, flags))
                model, seen = out, seen + rows
                if p == 0 or s == len(seg_rows) - 1:
                    seconds = clock.seconds()
                    point = "pass 1 at %d%%" % round(100 * seen / n) if p == 0 else "pass %d" % (p + 1)
                    points.add(seconds, evaluate(ws), seen, point)
                ws.finish()           # writes the model (-f) for the next segment: timed
                if p == 0:
                    os.remove(data)   # the cache file holds it now
    for name in os.listdir(tmp):
        os.remove(os.path.join(tmp, name))
    os.rmdir(tmp)
    return points


# ------------------------------------------------------------------------------------------- logreg
class Encoder:
    """Chunk of rows -> sparse matrix: hashed C<k>=<hex> tokens, then standardised log counts, then the
    13 missing flags. The counts' mean and std are the first chunk's."""

    def __init__(self, bits):
        from sklearn.feature_extraction import FeatureHasher
        self.hasher, self.mean, self.std = FeatureHasher(2 ** bits, input_type="string", alternate_sign=False), None, None

    def __call__(self, frame):
        import numpy as np
        import scipy.sparse as sp
        tokens = np.stack([(c + "=") + frame[c].fillna("").to_numpy(dtype=object) for c in CATS], axis=1)
        counts = signed_log(frame[INTS].to_numpy(dtype=np.float64))
        missing = np.isnan(counts)
        if self.mean is None:
            self.mean, self.std = np.nanmean(counts, axis=0), np.nanstd(counts, axis=0)
            self.mean, self.std = np.nan_to_num(self.mean), np.where(self.std > 0, self.std, 1.0)
        dense = np.where(missing, 0.0, (counts - self.mean) / self.std)
        return sp.hstack([self.hasher.transform(tokens), sp.csr_matrix(np.hstack([dense, missing]))],
                         format="csr"), frame["label"].to_numpy()


def run_logreg(args, clock, threads):
    import numpy as np
    import sklearn
    from sklearn.linear_model import SGDClassifier
    from sklearn.metrics import roc_auc_score
    sgd = {"loss": "log_loss", "penalty": "l2", "alpha": args.alpha, "learning_rate": "optimal",
           "random_state": args.seed}
    info = {"library": "scikit-learn " + sklearn.__version__, "hash_bits": args.hash_bits, "chunk": args.chunk,
            "epochs": args.passes, "numeric": "sign(x)*log1p(|x|), standardised (first chunk), missing flags",
            "categorical": "FeatureHasher tokens C<k>=<hex>, alternate_sign False", **sgd}
    points = Points("logreg", threads, info)
    model, encode, chunks, seen = SGDClassifier(**sgd), Encoder(args.hash_bits), [], 0
    x_test = y_test = None

    def evaluate(point):
        seconds = clock.seconds()
        with clock.pause():
            auc = roc_auc_score(y_test, model.decision_function(x_test))
        points.add(seconds, auc, seen, point)

    for i, frame in enumerate(read_frame(args.train, object, chunksize=args.chunk)):
        x, y = encode(frame)
        if x_test is None:
            with clock.pause():        # the test rows, with the standardisation fitted on the first chunk
                x_test, y_test = encode(read_frame(args.test, object))
        model.partial_fit(x, y, classes=np.array([0, 1]))
        chunks.append((x, y))
        seen += len(y)
        evaluate("epoch 1 chunk %d" % (i + 1))
    rng = np.random.default_rng(args.seed)
    for epoch in range(2, args.passes + 1):
        for i in rng.permutation(len(chunks)):
            model.partial_fit(*chunks[i])
            seen += len(chunks[i][1])
        evaluate("epoch %d" % epoch)
    return points


SYSTEMS = {"lightgbm": run_lightgbm, "vw": run_vw, "logreg": run_logreg}


class Parser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, "%s: error: %s\n" % (self.prog, message))


def main(argv=None):
    p = Parser(prog="auc_peers.py", description=__doc__.split("\n\n")[0],
               formatter_class=argparse.RawDescriptionHelpFormatter,
               epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    p.add_argument("--system", required=True, choices=sorted(SYSTEMS), help="the peer to run")
    p.add_argument("--train", required=True, help="training rows, Criteo text (.gz: gzip)")
    p.add_argument("--test", required=True, help="test rows, same format (reading them is not timed)")
    p.add_argument("--out", required=True, help="JSON lines appended here, one per point")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                   help="LightGBM's num_threads (VW and SGD use one) (default: the cores, %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of LightGBM and SGD (default 0)")
    p.add_argument("--rounds", type=int, default=300, help="lightgbm: boosting rounds (default 300)")
    p.add_argument("--cat-encoding", choices=["native", "count"], default="native",
                   help="lightgbm: native categorical codes or training counts (default native)")
    p.add_argument("--min-count", type=int, default=10,
                   help="lightgbm native: values seen fewer times share the 'other' code (default 10)")
    p.add_argument("--passes", type=int, default=3, help="vw passes, logreg epochs (default 3)")
    p.add_argument("--bits", type=int, default=23, help="vw: -b, hash bits (default 23)")
    p.add_argument("--hash-bits", type=int, default=20, help="logreg: FeatureHasher bits (default 20)")
    p.add_argument("--alpha", type=float, default=1e-6, help="logreg: SGD's L2 strength (default 1e-6)")
    p.add_argument("--chunk", type=int, default=100000, help="logreg: rows per chunk (default 100000)")
    p.add_argument("--tmpdir", default=None, help="vw: where its text and cache files go (default: $TMPDIR)")
    args = p.parse_args(argv)
    for name in ("threads", "rounds", "passes", "chunk", "min_count"):
        if getattr(args, name) < 1:
            p.error("--%s must be at least 1" % name.replace("_", "-"))
    for path in (args.train, args.test):
        if not os.path.isfile(path):
            p.error("no such file: %s" % path)
    try:
        points = SYSTEMS[args.system](args, Clock(), args.threads)
    except ImportError as e:
        return "auc_peers.py: %s: cannot import %s (is this the peers' venv?)" % (args.system, e.name or e)
    except MemoryError:
        return "auc_peers.py: %s: out of memory" % args.system
    except Exception as e:      # a one-line account of any other failure; nothing is written
        return "auc_peers.py: %s failed: %s: %s" % (args.system, type(e).__name__, str(e).splitlines()[0] if str(e) else "")
    if not points.records:
        return "auc_peers.py: %s: no point was measured" % args.system
    points.write(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
