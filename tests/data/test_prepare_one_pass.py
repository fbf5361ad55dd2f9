"""prepare on click-log text in one streaming pass (issue 27): the file it writes is byte for byte the one
the two-pass path writes (plain and gzip); the source is read once; a bad row, or a failure while the file
is put together, leaves neither the packed file nor a temporary file; training reads the file."""
import filecmp
import os
import sys

import numpy as np
import pytest

import mpinn.data.packed.writing as packing
from conftest import run
from mpinn.bench.w4 import W4, write_text
from mpinn.core.errors import MpinnError
from mpinn.data import DataSpec, HashSpec
from mpinn.data.formats.clicktext import ClickTextSource
from mpinn.data.fit.labels import LabelScan
from mpinn.data.packed.format import PackedDataset
from mpinn.prepare import prepare

SCALE = 20000           # small cardinalities: fast
ROWS = 5000
AUTO = HashSpec(bits=None)      # --hash-bits auto: 18 for click-log text, without a pass of its own


def like(meta):
    """prepare's keywords for rows read as another packed file's (python -m mpinn.prepare --like FILE): its
    task, classes, hashing contract and numeric transform."""
    return {"spec": DataSpec(task=meta["task"], classes=meta.get("classes")),
            "hashing": HashSpec(contract=meta.get("hashing")), "transform": meta.get("transform")}


def click_text(tmp_path, name, rows=ROWS, start=0):
    path = str(tmp_path / name)
    write_text(W4(0, SCALE), path, start, rows)
    return path


class Counting:
    """A source that counts how often it is read, and the rows it gives."""

    def __init__(self, source):
        self.source, self.calls, self.rows = source, 0, 0

    def __getattr__(self, name):
        return getattr(self.source, name)

    def parts(self):
        self.calls += 1
        for p in self.source.parts():
            self.rows += p.n
            yield p


def leftovers(d, keep):
    return sorted(set(os.listdir(d)) - set(keep))


@pytest.mark.parametrize("name", ["w4.tsv", "w4.tsv.gz"])
def test_one_pass_writes_the_two_pass_bytes(tmp_path, name):
    src = click_text(tmp_path, name)
    one, two = str(tmp_path / "one.mpinn"), str(tmp_path / "two.mpinn")
    s1 = prepare(ClickTextSource(src, chunk_rows=1200), one, hashing=AUTO)
    s2 = prepare(ClickTextSource(src, chunk_rows=1200), two, hashing=AUTO, passes=2)
    assert (s1["passes"], s2["passes"]) == (1, 2)
    assert filecmp.cmp(one, two, shallow=False)
    assert leftovers(tmp_path, [name, "one.mpinn", "two.mpinn"]) == []
    data = PackedDataset(one, verify=True)
    assert len(data) == ROWS and data.meta["task"] == "binary" and data.meta["classes"] == ["0", "1"]
    assert data.meta["hashing"]["bits"] == 18 and data.meta["numeric_stats"] and data.meta["transform"]
    # the classes fixed up front are what the label scan of the two-pass path finds in these rows
    scan = LabelScan()
    for p in ClickTextSource(src).parts():
        scan.update(p.labels)
    assert scan.result() == ("binary", ["0", "1"])
    # and the command line writes the same file, in one pass
    r = run([sys.executable, "-m", "mpinn.prepare", "--data", src, "--format", "criteo", "--out",
             str(tmp_path / "cli.mpinn"), "--chunk-rows", "1200"], timeout=120)
    assert r.returncode == 0, r.stderr
    assert "one pass" in r.stderr and "rows/s" in r.stderr and "pass 1/2" not in r.stderr, r.stderr
    assert filecmp.cmp(one, str(tmp_path / "cli.mpinn"), shallow=False)


def test_one_pass_with_a_positive_class_and_like(tmp_path):
    """--positive-class 0 and --like (contract, task, classes and transform of another file) take one pass
    too, and write the bytes the two passes write."""
    src = click_text(tmp_path, "w4.tsv", rows=2000)
    for kw in ({"spec": DataSpec(positive="0"), "hashing": HashSpec(bits=12)},
               like(PackedDataset(str(_packed(tmp_path))).meta)):
        one, two = str(tmp_path / "one.mpinn"), str(tmp_path / "two.mpinn")
        assert prepare(ClickTextSource(src, chunk_rows=700), one, **kw)["passes"] == 1
        prepare(ClickTextSource(src, chunk_rows=700), two, passes=2, **kw)
        assert filecmp.cmp(one, two, shallow=False)
    assert PackedDataset(one).meta["classes"] == ["0", "1"]


def _packed(tmp_path):
    path = tmp_path / "train.mpinn"
    if not path.exists():
        prepare(ClickTextSource(click_text(tmp_path, "train.tsv", rows=1500, start=9000)), str(path),
                hashing=HashSpec(bits=14))
    return path


def test_the_one_pass_reads_the_source_once(tmp_path):
    src = click_text(tmp_path, "w4.tsv.gz")
    one = Counting(ClickTextSource(src, chunk_rows=1000))
    prepare(one, str(tmp_path / "one.mpinn"), hashing=AUTO)
    assert (one.calls, one.rows) == (1, ROWS)
    two = Counting(ClickTextSource(src, chunk_rows=1000))
    prepare(two, str(tmp_path / "two.mpinn"), hashing=AUTO, passes=2)
    assert (two.calls, two.rows) == (2, 2 * ROWS)
    # what needs a scan first is not written in one pass
    with pytest.raises(MpinnError, match="cannot write .* in one pass"):
        prepare(ClickTextSource(src), str(tmp_path / "x.mpinn"), hashing=HashSpec("split"), passes=1)


@pytest.mark.parametrize("name", ["w4.tsv", "w4.tsv.gz"])
def test_a_bad_row_leaves_no_file_behind(tmp_path, name):
    src = click_text(tmp_path, "good.tsv", rows=3000)
    lines = open(src).read().splitlines(True)
    cells = lines[2344].split("\t")
    cells[1 + 13 + 4] = "zz12cafe"          # C5 of line 2345: not hexadecimal
    lines[2344] = "\t".join(cells)
    os.unlink(src)
    bad = str(tmp_path / name)
    if name.endswith(".gz"):
        import gzip
        with gzip.open(bad, "wt") as f:
            f.writelines(lines)
    else:
        with open(bad, "w") as f:
            f.writelines(lines)
    out = str(tmp_path / "bad.mpinn")
    r = run([sys.executable, "-m", "mpinn.prepare", "--data", bad, "--format", "criteo", "--out", out,
             "--chunk-rows", "500", "--quiet"], timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == ["mpinn: error: %s line 2345: C5 is 'zz12cafe', not an 8-hex-digit value"
                                             % bad], r.stderr
    assert leftovers(tmp_path, [name]) == []


def test_a_failure_while_closing_leaves_no_file_behind(tmp_path, monkeypatch):
    src = click_text(tmp_path, "w4.tsv", rows=1000)

    def broken(src_fd, dst_fd, count, offset, chunk=0):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(packing, "_copy_into", broken)
    with pytest.raises(OSError, match="No space"):
        prepare(ClickTextSource(src, chunk_rows=300), str(tmp_path / "x.mpinn"), hashing=HashSpec(bits=12))
    assert leftovers(tmp_path, ["w4.tsv"]) == []


def test_the_copy_falls_back_to_reads_and_writes(tmp_path, monkeypatch):
    """Where copy_file_range is missing (or refused across file systems), the sections are copied by
    reads and writes: the same file."""
    src = click_text(tmp_path, "w4.tsv", rows=1500)
    prepare(ClickTextSource(src, chunk_rows=400), str(tmp_path / "a.mpinn"), hashing=HashSpec(bits=12))
    monkeypatch.delattr(os, "copy_file_range", raising=False)
    monkeypatch.setattr(packing, "_copy_into", lambda *a, **k: _orig_copy(*a, chunk=4096))
    prepare(ClickTextSource(src, chunk_rows=400), str(tmp_path / "b.mpinn"), hashing=HashSpec(bits=12))
    assert filecmp.cmp(str(tmp_path / "a.mpinn"), str(tmp_path / "b.mpinn"), shallow=False)


_orig_copy = packing._copy_into


def test_training_reads_the_one_pass_file(tmp_path):
    src = click_text(tmp_path, "w4.tsv.gz", rows=4000)
    out = str(tmp_path / "w4.mpinn")
    r = run([sys.executable, "-m", "mpinn.prepare", "--data", src, "--out", out, "--quiet"], timeout=120)
    assert r.returncode == 0, r.stderr
    r = run([sys.executable, "-m", "mpinn.train", "--data", out, "--epochs", "1", "--no-progress",
             "--batch-size", "256", "--model-out", str(tmp_path / "m.npz")], timeout=180)
    assert r.returncode == 0, r.stderr
    assert "4000" in r.stdout or "3600" in r.stdout, r.stdout
    assert np.isfinite(float(r.stdout.split("auc ")[-1].split()[0]))
