"""The cases of tests/entry/test_fuzz_cli.py: a data file of one reader's kind, made bad in one to three ways
(truncated, bytes flipped, wrong types, nesting, encodings, huge fields and lines, non-finite values, duplicate
and odd column names), and the options to train on it with (some of them bad). make_case(kind, seed, dir) writes
the files and returns the command line's arguments; the same kind and seed give the same case."""
import gzip
import json

import numpy as np

KINDS = ("csv", "parquet", "npz", "mat", "packed", "clicktext", "options", "predict")
HUGE_LINE = (1 << 24) + 10          # past mpinn.data.formats.csvtext.MAX_LINE


def _pick(rng, items):
    return items[int(rng.integers(len(items)))]


def _damage(rng, raw, how):
    raw = bytearray(raw)
    if how == "truncate" and raw:
        return bytes(raw[:int(rng.integers(len(raw)))])
    if how == "flip" and raw:
        for _ in range(int(rng.integers(1, 6))):
            raw[int(rng.integers(len(raw)))] ^= int(rng.integers(1, 256))
    return bytes(raw)


# ---------------------------------------------------------------- CSV
ODD_NAMES = ["a", "a", "", " y ", "x y", '"q"', "ünï", "1", "#", "y", "a" * 300, "NaN", "-", "\t"]
CELLS = ["", "NA", "nan", "inf", "-inf", "1e308", "-1e999", "1e300", "abc", "0x1F", " 3 ", "1,5", "\u00e9", "TRUE",
         "-0", "9" * 400]


def csv_text(rng, rows=None):
    """(header, rows) of a small table: y (labels), a (text), b (few integers), x (numbers)."""
    n = int(rows if rows is not None else rng.integers(20, 160))
    task = _pick(rng, ["binary", "binary", "multi", "regression", "text"])
    y = {"binary": lambda: rng.integers(0, 2, n).astype(str), "multi": lambda: rng.integers(0, 5, n).astype(str),
         "regression": lambda: np.char.mod("%.4g", rng.standard_normal(n) * 10),
         "text": lambda: np.array(["yes", "no"])[rng.integers(0, 2, n)]}[task]()
    rows_ = [[y[i], "v%d" % rng.integers(0, 7), str(rng.integers(0, 4)), "%.5g" % rng.standard_normal()]
             for i in range(n)]
    return ["y", "a", "b", "x"], rows_


def csv_case(rng, d):
    header, rows = csv_text(rng)
    ways = list(rng.choice(["cells", "names", "ragged", "quote", "labels", "bom", "latin1", "utf16", "nul", "crlf",
                            "cr", "huge_field", "huge_line", "empty", "header_only", "truncate", "flip", "gz",
                            "none"], size=int(rng.integers(1, 4)), replace=False))
    if "huge_line" in ways and rng.random() < 0.7:      # a 16 MiB write: one case in a few
        ways.remove("huge_line")
    for w in ways:
        if w == "cells":
            for _ in range(int(rng.integers(1, 8))):
                rows[int(rng.integers(len(rows)))][int(rng.integers(1, 4))] = _pick(rng, CELLS)
        elif w == "names":
            header = [_pick(rng, ODD_NAMES) for _ in header]
        elif w == "ragged" and rows:
            r = rows[int(rng.integers(len(rows)))]
            r.append("extra") if rng.random() < 0.5 else r.pop()
        elif w == "quote" and rows:
            rows[int(rng.integers(len(rows)))][1] = '"unclosed' if rng.random() < 0.5 else 'a"b'
        elif w == "labels" and rows:
            how = _pick(rng, ["same", "missing", "huge", "many", "inf"])
            for i, r in enumerate(rows):
                r[0] = {"same": "1", "huge": "1e300", "many": "c%d" % i, "inf": "inf"}.get(how, r[0])
            if how == "missing":
                rows[int(rng.integers(len(rows)))][0] = _pick(rng, ["", "NA", "?"])
        elif w == "huge_field" and rows:
            rows[int(rng.integers(len(rows)))][1] = "z" * 200_000
        elif w == "huge_line" and rows:
            rows[int(rng.integers(len(rows)))][1] = "z" * HUGE_LINE
    text = "\n".join(",".join(r) for r in [header] + rows) + "\n"
    if "empty" in ways:
        text = ""
    elif "header_only" in ways:
        text = ",".join(header) + "\n"
    raw = text.encode("utf-16" if "utf16" in ways else "utf-8")
    if "crlf" in ways:
        raw = raw.replace(b"\n", b"\r\n")
    if "cr" in ways:
        raw = raw.replace(b"\n", b"\r")
    if "bom" in ways:
        raw = b"\xef\xbb\xbf" + raw
    if "latin1" in ways and raw:
        at = int(rng.integers(len(raw)))
        raw = raw[:at] + b"\xe9" + raw[at:]
    if "nul" in ways and raw:
        at = int(rng.integers(len(raw)))
        raw = raw[:at] + b"\x00" + raw[at:]
    for w in ("truncate", "flip"):
        if w in ways:
            raw = _damage(rng, raw, w)
    name = "data.csv"
    if "gz" in ways:
        raw, name = gzip.compress(raw), "data.csv.gz"
        if rng.random() < 0.4:
            raw = _damage(rng, raw, _pick(rng, ["truncate", "flip"]))
    (d / name).write_bytes(raw)
    args = ["--data", d / name]
    if rng.random() < 0.9:
        args += ["--label", _pick(rng, ["y", "y", "y", "a", "nope"])]
    if rng.random() < 0.4:
        args += ["--categorical", _pick(rng, ["a", "a,b", "zz"]), "--numeric", _pick(rng, ["x", "b,x", "a"])]
    return args


# ---------------------------------------------------------------- Parquet
def parquet_case(rng, d):
    import pyarrow as pa
    import pyarrow.parquet as pq
    n = int(rng.integers(10, 200))
    cols = {"y": pa.array(rng.integers(0, 2, n))}
    pool = {
        "a": lambda: pa.array(["v%d" % i for i in rng.integers(0, 5, n)]),
        "x": lambda: pa.array(rng.standard_normal(n)),
        "big": lambda: pa.array(rng.integers(0, 2 ** 63, n).astype(np.uint64)),
        "inf": lambda: pa.array(np.where(rng.random(n) < 0.3, np.inf, rng.standard_normal(n))),
        "null": lambda: pa.nulls(n),
        "some_null": lambda: pa.array([None if rng.random() < 0.3 else 1.5 for _ in range(n)]),
        "list": lambda: pa.array([[1, 2]] * n),
        "struct": lambda: pa.array([{"p": 1, "q": "z"}] * n),
        "map": lambda: pa.array([[("k", 1)]] * n, pa.map_(pa.string(), pa.int64())),
        "dict": lambda: pa.array(["v%d" % i for i in rng.integers(0, 3, n)]).dictionary_encode(),
        "bin": lambda: pa.array([bytes([i % 256, 255]) for i in range(n)]),
        "ts": lambda: pa.array(np.arange(n).astype("datetime64[s]")),
        "f16": lambda: pa.array(rng.standard_normal(n).astype(np.float16)),
        "bool": lambda: pa.array(rng.random(n) < 0.5),
        "text_y": lambda: pa.array(np.array(["no", "yes"])[rng.integers(0, 2, n)]),
    }
    for name in rng.choice(list(pool), size=int(rng.integers(1, 6)), replace=False):
        cols[str(name)] = pool[name]()
    if rng.random() < 0.2:
        cols["y"] = _pick(rng, [pa.nulls(n), pa.array([[1]] * n), pa.array(np.full(n, 1e300)),
                                pa.array([b"no", b"yes"] * (n // 2) + [b"no"] * (n % 2)),
                                pa.array(rng.standard_normal(n) * 1e200),
                                pa.array(np.arange(n).astype("datetime64[s]"))])
    names = list(cols)
    if rng.random() < 0.2:
        names[-1] = _pick(rng, ["y", "", "a" * 300, names[0]])        # duplicate and odd names
    table = pa.Table.from_arrays(list(cols.values()), names=names)
    path = d / "data.parquet"
    pq.write_table(table, path)
    if rng.random() < 0.3:
        path.write_bytes(_damage(rng, path.read_bytes(), _pick(rng, ["truncate", "flip"])))
    args = ["--data", path, "--label", "y"]
    if rng.random() < 0.4:
        args += ["--categorical", ",".join(str(c) for c in rng.choice(names, size=min(2, len(names)),
                                                                      replace=False))]
    return args


# ---------------------------------------------------------------- .npz and .mat
def dense_arrays(rng):
    n, k = int(rng.integers(0, 120)), int(rng.integers(1, 6))
    X = rng.standard_normal((n, k))
    y = rng.integers(0, 2, n)
    how = _pick(rng, ["ok", "ok", "nan_x", "inf_x", "int_x", "str_x", "obj_x", "1d_x", "3d_x", "str_y", "nan_y",
                      "short_y", "no_y", "float_y", "huge_y", "bool_x", "complex_x", "2d_y", "one_class",
                      "complex_y", "bytes_y", "date_y", "huge_x"])
    if how == "nan_x" and n:
        X[rng.random(X.shape) < 0.2] = np.nan
    elif how == "inf_x" and n:
        X[0, 0] = np.inf
    elif how == "int_x":
        X = rng.integers(-5, 5, (n, k))
    elif how == "str_x":
        X = X.astype(str)
    elif how == "obj_x":
        X = X.astype(object)
    elif how == "1d_x":
        X = X[:, 0]
    elif how == "3d_x":
        X = X[:, :, None]
    elif how == "str_y":
        y = np.array(["a", "b", "c"])[rng.integers(0, 3, n)]
    elif how == "nan_y" and n:
        y = y.astype(float)
        y[0] = np.nan
    elif how == "short_y":
        y = y[:-1]
    elif how == "float_y":
        y = rng.standard_normal(n)
    elif how == "huge_y":
        y = rng.standard_normal(n) * 1e300
    elif how == "bool_x":
        X = X > 0
    elif how == "complex_x":
        X = X + 1j
    elif how == "2d_y":
        y = np.stack([y, y], axis=1)
    elif how == "one_class":
        y = np.zeros(n, int)
    elif how == "complex_y":
        y = y + 1j
    elif how == "bytes_y":
        y = np.array([b"no", b"yes", b"\xff"])[y + (rng.random(n) < 0.1)]
    elif how == "huge_x" and n:
        X[:, 0] *= 1e307
        X[0, -1] = _pick(rng, [1e308, -1.7e308])
    elif how == "date_y":
        y = (y * 3).astype("datetime64[D]")
    return X, (None if how == "no_y" else y)


def npz_case(rng, d):
    X, y = dense_arrays(rng)
    arrays = {"X": X} if y is None else {"X": X, "y": y}
    if rng.random() < 0.15:
        arrays = {"Z": X}
    path = d / "data.npz"
    with open(path, "wb") as f:
        np.savez(f, **arrays)           # an object array is pickled: the reader must refuse it
    if rng.random() < 0.3:
        path.write_bytes(_damage(rng, path.read_bytes(), _pick(rng, ["truncate", "flip"])))
    return ["--data", path]


def mat_case(rng, d):
    import scipy.io
    X, y = dense_arrays(rng)
    path = d / "data.mat"
    arrays = {"X": X} if y is None else {"X": X, "y": np.asarray(y).reshape(-1, 1) if np.ndim(y) == 1 else y}
    how = _pick(rng, ["ok", "ok", "cell", "struct", "random", "text"])
    if how == "cell":
        arrays["X"] = np.array([[np.zeros(2)], [np.ones(3)]], dtype=object)
    elif how == "struct":
        arrays["X"] = {"a": np.zeros(3)}
    try:
        scipy.io.savemat(path, arrays)
    except Exception:           # what scipy cannot write is not a case
        scipy.io.savemat(path, {"X": np.zeros((3, 2)), "y": np.ones((3, 1))})
    if how == "random":
        path.write_bytes(rng.bytes(int(rng.integers(0, 3000))))
    elif how == "text":
        path.write_text("y,x\n1,2\n")
    if rng.random() < 0.3:
        path.write_bytes(_damage(rng, path.read_bytes(), _pick(rng, ["truncate", "flip"])))
    return ["--data", path]


# ---------------------------------------------------------------- packed files
def packed_case(rng, d):
    from mpinn.data import HashSpec, load_default
    from mpinn.data.packed.writing import write_dataset
    path = d / "data.mpinn"
    write_dataset(str(path), load_default(int(rng.integers(50, 400)), int(rng.integers(0, 3)),
                                          hashing=HashSpec(bits=int(rng.integers(6, 12)))))
    how = _pick(rng, ["truncate", "flip", "flip", "header", "ok"])
    if how in ("truncate", "flip"):
        path.write_bytes(_damage(rng, path.read_bytes(), how))
    elif how == "header":           # the JSON header with a field changed (same length kept where it can)
        raw = path.read_bytes()
        raw = raw.replace(b'"n_rows":', b'"n_rowz":', 1) if rng.random() < 0.5 else \
            raw.replace(b'"int32"', b'"int64"', 1)
        path.write_bytes(raw)
    args = ["--data", path]
    if rng.random() < 0.4:
        args += ["--input", "local"]
    return args


# ---------------------------------------------------------------- click-log text
def clicktext_case(rng, d):
    n = int(rng.integers(5, 120))
    lines = []
    for _ in range(n):
        f = [str(rng.integers(0, 2))] + [str(rng.integers(0, 50)) if rng.random() < 0.8 else "" for _ in range(13)]
        f += ["%08x" % rng.integers(0, 2 ** 32) if rng.random() < 0.9 else "" for _ in range(26)]
        lines.append(f)
    ways = [str(w) for w in rng.choice(["fields", "label", "count", "hex", "crlf", "nolabel", "huge", "none"],
                                       size=int(rng.integers(1, 3)), replace=False)]
    for w in ways:
        i = int(rng.integers(n))
        if w == "fields":
            lines[i] = lines[i][:-1] if rng.random() < 0.5 else lines[i] + ["x"]
        elif w == "label":
            lines[i][0] = _pick(rng, ["2", "", "-1", "yes"])
        elif w == "count":
            lines[i][int(rng.integers(1, 14))] = _pick(rng, ["1.5", "abc", "1e5", "--3", "9" * 30])
        elif w == "hex":
            lines[i][int(rng.integers(14, 40))] = _pick(rng, ["xyz", "1234567", "123456789", "ggggggg0"])
        elif w == "nolabel":
            lines = [line[1:] for line in lines]
        elif w == "huge" and rng.random() < 0.3:
            lines[i][20] = "a" * HUGE_LINE
    raw = ("\n".join("\t".join(line) for line in lines) + "\n").encode()
    name = _pick(rng, ["data.txt", "data.tsv", "data"])
    if "crlf" in ways:
        raw = raw.replace(b"\n", b"\r\n")
    if rng.random() < 0.3:
        raw, name = gzip.compress(raw), name + ".gz"
    if rng.random() < 0.2:
        raw = _damage(rng, raw, "truncate")
    (d / name).write_bytes(raw)
    return ["--data", d / name] + (["--format", "criteo"] if rng.random() < 0.3 else [])


# ---------------------------------------------------------------- option sets
OPTION_POOL = [
    ["--epochs", "0"], ["--epochs", "2"], ["--batch-size", "0"], ["--batch-size", "100000"], ["--lr", "-1"],
    ["--lr", "nan"], ["--lr", "1e9"], ["--hidden", "0"], ["--hidden", ""], ["--hidden", "3,2"], ["--hash-bits", "40"],
    ["--hash-bits", "3"], ["--holdout", "1.5"], ["--holdout", "0"], ["--holdout", "0.99"], ["--holdout-by", "time:zz"],
    ["--holdout-by", "last"], ["--holdout-by", "group:a"], ["--valid", "missing.csv"], ["--task", "regression"],
    ["--task", "multiclass"], ["--positive-class", "maybe"], ["--optimizer", "ftrl"], ["--optimizer", "sgd"],
    ["--l1", "0.1"], ["--table", "sharded"], ["--input", "local"], ["--reduce", "gather"], ["--parallel", "tower"],
    ["--average-every", "2"], ["--compress", "fp16"], ["--overlap"], ["--grad-accum", "3"], ["--wide", "on"],
    ["--keep", "last"], ["--early-stop", "1"], ["--lr-decay", "cosine"], ["--warmup-steps", "5"],
    ["--dtype", "float64"], ["--checkpoint-dir", "CK"], ["--checkpoint-every", "2"], ["--resume", "CK"],
    ["--metrics-out", "OUT/dir/"], ["--curve", "CURVE.csv"], ["--hash-mode", "split"], ["--buckets", "0"],
    ["--hash-mode", "onehot"], ["--step-timeout", "-3"], ["--max-bad-steps", "0"], ["--lr-decya", "cosine"],
    ["--seed", "x"], ["--numeric-transform", "none"], ["--eval-every", "3"], ["--shuffle-block", "7"],
    ["--batch-per-rank", "8"], ["--lr-scaling", "linear"], ["--hot-rows", "auto"], ["--device", "gpu"],
]


def options_case(rng, d):
    header, rows = csv_text(rng, int(rng.integers(30, 150)))
    (d / "data.csv").write_text("\n".join(",".join(r) for r in [header] + rows) + "\n")
    args = ["--data", d / "data.csv", "--label", "y"]
    for k in rng.choice(len(OPTION_POOL), size=int(rng.integers(1, 5)), replace=False):
        args += [str(a).replace("CK", str(d / "ck")).replace("OUT", str(d)).replace("CURVE", str(d / "curve"))
                 for a in OPTION_POOL[int(k)]]
    return args


# ---------------------------------------------------------------- predict's inputs
def predict_case(rng, d, model):
    """A model trained on a CSV (model: its path), damaged or not, and data to predict (a CSV, maybe bad)."""
    raw = model.read_bytes()
    how = _pick(rng, ["ok", "truncate", "flip", "header", "csv"])
    path = d / "model.npz"
    if how in ("truncate", "flip"):
        raw = _damage(rng, raw, how)
    elif how == "header":
        with np.load(model) as z:
            header, params = json.loads(str(z["header"][()])), z["params"]
        key = _pick(rng, ["hidden", "n_out", "n_sparse", "loss", "format", "task", "params", "classes"])
        if key in ("hidden", "n_out", "n_sparse"):
            header["spec"][key] = [10 ** 6] * 3 if key == "hidden" else _pick(rng, [0, -1, 10 ** 9, "x"])
        elif key == "loss":
            header["spec"]["loss"] = "hinge"
        elif key == "format":
            header["format"] = _pick(rng, ["mpinn-model-9", "other", None])
        elif key == "task":
            header["meta"]["task"] = _pick(rng, [None, "ranking"])
        elif key == "classes":
            header["meta"]["classes"] = None
        else:
            params = _pick(rng, [params[:-1], params.astype(str), params.reshape(1, 1, -1)])
        with open(path, "wb") as f:
            np.savez(f, header=np.array(json.dumps(header)), params=params)
        raw = path.read_bytes()
    elif how == "csv":
        raw = b"y,a\n1,2\n"
    path.write_bytes(raw)
    csv_args = csv_case(rng, d)
    data = csv_args[1]
    return ["--model", path, "--data", data, "--out", d / "pred.csv"] + (["--id", "row"] if rng.random() < 0.3
                                                                          else [])


def make_case(kind, seed, d, model=None):
    rng = np.random.default_rng([seed, KINDS.index(kind)])
    if kind == "predict":
        return predict_case(rng, d, model)
    return {"csv": csv_case, "parquet": parquet_case, "npz": npz_case, "mat": mat_case, "packed": packed_case,
            "clicktext": clicktext_case, "options": options_case}[kind](rng, d)
