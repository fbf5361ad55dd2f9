"""The click-log text format (the Criteo logs': label, I1..I13, C1..C26, tab-separated, maybe gzip) and W4, the
generator of that shape: the generator is deterministic by row; the reader gives back exactly the rows the
generator made (both readers, plain and gzip); every malformed row is one line naming the row, exit 2; the CLI
trains on it, predicts on a file without labels, and prepare packs it to the same hashed rows."""
import gzip
import json
import sys

import numpy as np
import pytest

from conftest import run
from mpinn.bench.w4 import BLOCK, MISSING_INT, W4, write_text
from mpinn.core.errors import MpinnError
from mpinn.data import HashSpec, load_data
from mpinn.data.formats.clicktext import CAT_NAMES, INT_NAMES, ClickTextSource

SCALE = 20000           # small cardinalities (2..1999 values a column): fast, and every value repeats


def generated(start, n, seed=0):
    parts = list(W4(seed, SCALE).rows(start, n))
    return tuple(np.concatenate([p[k] for p in parts]) for k in range(4))


def test_rows_are_the_same_whatever_the_start_and_the_count():
    ids, ints, y, p = generated(0, BLOCK + 500)
    ids2, ints2, y2, p2 = generated(BLOCK - 300, 700)       # across a block boundary
    sl = slice(BLOCK - 300, BLOCK + 400)
    assert np.array_equal(ids[sl], ids2) and np.array_equal(ints[sl], ints2)
    assert np.array_equal(y[sl], y2) and np.array_equal(p[sl], p2)
    other = generated(0, 1000, seed=1)
    assert not np.array_equal(ids[:1000], other[0])


def test_the_shape_is_the_logs():
    gen = W4(0, 1)
    assert gen.cards.tolist()[:3] == [39884406, 39043, 17289] and len(gen.cards) == 26
    ids, ints, y, p = gen.block(0)
    assert 0.2 < y.mean() < 0.3                                  # the positive rate asked for (0.25)
    assert ((ints == MISSING_INT).mean(axis=0) > 0.01).sum() >= 6   # counts often missing
    assert (ids < 0).any(axis=0).sum() >= 3                         # and categorical values too
    head = np.bincount(ids[:, 1][ids[:, 1] >= 0])
    assert head.max() > 20 * np.median(head[head > 0])              # a heavy head


@pytest.mark.parametrize("name", ["w4.tsv", "w4.txt.gz"])
@pytest.mark.parametrize("engine", ["arrow", "python"])
def test_the_reader_gives_back_the_generated_rows(tmp_path, name, engine):
    gen, n = W4(0, SCALE), 3000
    path = str(tmp_path / name)
    write_text(gen, path, 100, n)
    ids, ints, y, _ = generated(100, n)
    source = ClickTextSource(path, chunk_rows=1000)
    parts = list(source._arrow_parts() if engine == "arrow" else source._python_parts())
    assert [p.n for p in parts] == [1000, 1000, 1000]
    labels = np.concatenate([p.labels for p in parts])
    Xd = np.concatenate([p.Xd for p in parts])
    assert np.array_equal(labels, y)
    assert np.array_equal(np.isnan(Xd), ints == MISSING_INT)
    assert np.array_equal(Xd[~np.isnan(Xd)], ints[ints != MISSING_INT].astype(float))
    hexes = gen.hex_codes(ids)
    for j in range(26):
        got = [v for p in parts for v in (p.cats[j].to_pylist() if hasattr(p.cats[j], "to_pylist") else p.cats[j])]
        assert got == [h.decode() for h in hexes[:, j]], CAT_NAMES[j]
    assert source.categorical == CAT_NAMES and source.numeric == INT_NAMES


def lines_of(gen, n):
    """The first n generated rows as text lines, each a list of its fields."""
    ids, ints, y, _ = generated(0, n)
    from mpinn.bench.w4 import text_lines
    return [line.split("\t") for line in text_lines(gen, ids, ints, y).rstrip("\n").split("\n")]


@pytest.mark.parametrize("damage,message", [
    (lambda f: f[:-1], "line 5: 39 fields; the lines of this file have 40"),
    (lambda f: f + ["00aa00aa"], "line 5: 41 fields; the lines of this file have 40"),
    (lambda f: f[:20] + ["zz12345g"] + f[21:], "line 5: C7 is 'zz12345g', not an 8-hex-digit value"),
    (lambda f: f[:3] + ["1.5"] + f[4:], "line 5: I3 is '1.5', not an integer"),
    (lambda f: ["2"] + f[1:], "line 5: the label is '2'; a click-log label is 0 or 1"),
    (lambda f: [""] + f[1:], "line 5: the label is ''; a click-log label is 0 or 1"),
])
@pytest.mark.parametrize("gz", [False, True])
def test_a_bad_row_is_one_line_naming_it(tmp_path, damage, message, gz):
    gen = W4(0, SCALE)
    rows = lines_of(gen, 8)
    rows[4] = damage(rows[4])
    text = "".join("\t".join(r) + "\n" for r in rows)
    path = tmp_path / ("bad.tsv.gz" if gz else "bad.tsv")
    with (gzip.open(path, "wt") if gz else open(path, "w")) as f:
        f.write(text)
    with pytest.raises(MpinnError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_data(str(path), hashing=HashSpec(bits=10))
    r = run([sys.executable, "-m", "mpinn.train", "--data", str(path), "--epochs", "1", "--no-progress",
             "--model-out", str(tmp_path / "m.npz")], timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert message in r.stderr, r.stderr
    assert not (tmp_path / "m.npz").exists()


def test_a_truncated_gzip_file_is_one_line(tmp_path):
    path = tmp_path / "cut.tsv.gz"
    write_text(W4(0, SCALE), str(path), 0, 5000)
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])
    with pytest.raises(MpinnError, match="cut.tsv.gz line"):
        load_data(str(path), hashing=HashSpec(bits=10))


@pytest.mark.mpi
def test_train_predict_and_prepare_on_click_text(tmp_path, launcher):
    """The CLI with nothing but the files: the format is told by the first line; a test file without labels
    (39 fields) is predicted; prepare's packed file holds the same hashed rows as the text read directly."""
    from conftest import mpirun
    gen = W4(0, SCALE)
    train, test = str(tmp_path / "train.txt"), str(tmp_path / "test.tsv.gz")
    write_text(gen, train, 0, 6000)
    write_text(gen, test, 6000, 1500)
    r = mpirun(2, ["-m", "mpinn.train", "--data", train, "--valid", test, "--epochs", "1", "--no-progress",
                   "--hash-bits", "14", "--batch-size", "512", "--eval-every", "4", "--curve", str(tmp_path / "c.jsonl"),
                   "--model-out", str(tmp_path / "m.npz")], timeout=180)
    assert r.returncode == 0, r.stderr
    curve = [json.loads(x) for x in open(tmp_path / "c.jsonl")]
    steps = [c["step"] for c in curve if c["at"] == "step"]
    first = [c["at"] for c in curve if c.get("model") != "averaged"]     # an ensemble's: its first model's, then
    assert steps == list(range(4, 12, 4)) and first[-1] == "epoch"         # the averaged model's row at the end
    assert [c["at"] for c in curve if c.get("model") == "averaged"] in ([], ["end"])
    assert all(c["valid_auc"] > 0.6 for c in curve)
    assert [c["samples"] for c in curve if c["at"] == "step"][:2] == [4 * 512, 8 * 512]
    # a test file without labels: 39 fields a line
    with gzip.open(test, "rt") as f, open(tmp_path / "nolabel.tsv", "w") as g:
        g.writelines(line.split("\t", 1)[1] for line in f)
    r = run([sys.executable, "-m", "mpinn.predict", "--model", str(tmp_path / "m.npz"), "--data",
             str(tmp_path / "nolabel.tsv"), "--out", str(tmp_path / "p.csv")], timeout=120)
    assert r.returncode == 0, r.stderr
    assert len(open(tmp_path / "p.csv").read().splitlines()) == 1 + 1500
    # prepare: the packed rows equal the text's, hashed
    r = run([sys.executable, "-m", "mpinn.prepare", "--data", test, "--out", str(tmp_path / "t.mpinn"),
             "--hash-bits", "14", "--quiet"], timeout=120)
    assert r.returncode == 0, r.stderr
    packed, direct = load_data(str(tmp_path / "t.mpinn")), load_data(test, hashing=HashSpec(bits=14))
    rows = packed.take(np.arange(len(packed)))
    assert (rows.Xs != direct.Xs).nnz == 0 and np.array_equal(rows.y, direct.y)
    assert np.array_equal(np.isnan(rows.Xd), np.isnan(direct.Xd))


def test_holdout_last_and_eval_every_rules(tmp_path):
    path = str(tmp_path / "w4.tsv")
    write_text(W4(0, SCALE), path, 0, 2000)
    r = run([sys.executable, "-m", "mpinn.train", "--data", path, "--eval-every", "5", "--holdout", "0",
             "--no-progress", "--model-out", str(tmp_path / "m.npz")], timeout=120)
    assert r.returncode == 2 and "--eval-every evaluates held-out rows" in r.stderr, r.stderr
    r = run([sys.executable, "-m", "mpinn.train", "--data", path, "--holdout-by", "last", "--holdout", "0.25",
             "--epochs", "1", "--hash-bits", "12", "--no-progress", "--model-out", str(tmp_path / "m.npz"),
             "--metrics-out", str(tmp_path / "m.json")], timeout=120)
    assert r.returncode == 0, r.stderr
    assert "1500 training rows, 500 held out (the last 25% of the rows, in file order)" in r.stdout, r.stdout
