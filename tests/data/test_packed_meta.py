"""A packed dataset's meta is checked (issue 60, item 4): with `classes` swapped to ["1", "0"] in a packed file every
prediction came out flipped, with `hashing.bits` edited training wrote a model predict crashed on, and `prepare
--verify --data X.mpinn` answered that prepare reads CSV. Now the meta's checksum (written by prepare) and its fit
to the rows are checked on every open, one line each; `prepare --verify --data X.mpinn` without --out checks an
existing file or manifest whole, against every row; a file written before the checksum is still read."""
import json
import os
import re
import sys

import numpy as np
import pytest

from conftest import mpirun, run
from mpinn.data.packed.format import PackedDataset
from mpinn.data.packed.parts import MANIFEST_MAGIC, is_manifest, manifest_bytes

TRAIN = ["--epochs", "1", "--ensemble", "1", "--hidden", "8", "--no-progress", "--quiet"]


def write_table(path, classes=("no", "yes"), rows=400, seed=0):
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        f.write("y,site,ad,price\n" + "".join("%s,s%d,a%d,%.3f\n" % (
            classes[rng.integers(0, len(classes))], rng.integers(0, 30), rng.integers(0, 40), rng.standard_normal())
            for _ in range(rows)))
    return str(path)


def prepare(*args):
    return run([sys.executable, "-m", "mpinn.prepare"] + [str(a) for a in args])


def packed(tmp_path, *more, classes=("no", "yes"), name="d.mpinn"):
    table = write_table(tmp_path / (name + ".csv"), classes)
    out = str(tmp_path / name)
    r = prepare("--data", table, "--label", "y", "--categorical", "site,ad", "--numeric", "price", "--hash-bits",
                "11", "--out", out, "--quiet", *more)
    assert r.returncode == 0, r.stderr
    return table, out


def edited(path, edit, to=None):
    """A copy of packed file or manifest `path` (to: its name) whose header's meta went through edit(meta, header),
    its length kept (a packed file's header is padded)."""
    to = to or path + ".edited.mpinn"
    with open(path, "rb") as f:
        raw = f.read()
    if is_manifest(path):
        body = json.loads(raw[len(MANIFEST_MAGIC):])
        edit(body["meta"], body)
        out = MANIFEST_MAGIC + b"\n" + json.dumps(body).encode() + b"\n"
    else:
        n = int.from_bytes(raw[8:16], "little")
        header = json.loads(raw[16:16 + n])
        edit(header["meta"], header)
        text = json.dumps(header, separators=(",", ":")).encode()
        assert len(text) <= n
        out = raw[:16] + text + b" " * (n - len(text)) + raw[16 + n:]
    with open(to, "wb") as f:
        f.write(out)
    return to


def one_line(r, pattern):
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and re.fullmatch("mpinn: error: " + pattern, lines[0]), r.stderr
    return lines[0]


def swap(meta, header):
    meta["classes"] = meta["classes"][::-1]


def more_bits(meta, header):
    meta["hashing"]["bits"] += 1


def no_checksum(edit=None):
    def go(meta, header):
        header.pop("meta_xxh64")
        if edit:
            edit(meta, header)
    return go


def test_verify_checks_an_existing_packed_file_and_an_edited_meta_is_refused_everywhere(tmp_path):
    table, out = packed(tmp_path)
    r = prepare("--verify", "--data", out)
    assert r.returncode == 0, r.stderr
    assert r.stdout == (
        "checked %s: 400 rows, 2048 input columns (trick: 2 features -> 2^11 columns) + 1 dense, task binary (classes "
        "no, yes); every byte against its checksums, the meta against its checksum and against every row's label "
        "and column ids\n" % out), r.stdout
    r = run([sys.executable, "-m", "mpinn.train", out, "--model-out", tmp_path / "m.npz"] + TRAIN)
    assert r.returncode == 0, r.stderr
    checksum = r"%s: its meta \(task, classes, hashing contract, columns\) is not what prepare wrote: it does not " \
               r"match its checksum \(an edited or damaged file\); prepare it again"
    for edit in (swap, more_bits, lambda meta, header: meta.update(numeric=["cost"])):
        bad = edited(out, edit)
        one_line(prepare("--verify", "--data", bad), checksum % re.escape(bad))
        one_line(run([sys.executable, "-m", "mpinn.train", bad, "--model-out", tmp_path / "x.npz"] + TRAIN),
                 checksum % re.escape(bad))
        one_line(run([sys.executable, "-m", "mpinn.predict", "--model", tmp_path / "m.npz", "--data", bad]),
                 checksum % re.escape(bad))
        assert not os.path.exists(tmp_path / "x.npz")


def test_a_file_without_the_checksum_is_read_and_its_meta_checked_against_its_rows(tmp_path):
    """A file from before the meta's checksum (none is kept in tests/data; the header as such a file has it) reads
    as before, --verify says the checksum is missing; its meta is still checked against the layout on every open,
    and against every row by --verify."""
    table, out = packed(tmp_path)
    old = edited(out, no_checksum())
    r = prepare("--verify", "--data", old)
    assert r.returncode == 0 and "the meta (written without a checksum, by an older mpinn: prepare it again to have " \
                                 "one) against every row's label and column ids" in r.stdout, r.stderr
    r = run([sys.executable, "-m", "mpinn.train", old, "--model-out", tmp_path / "m.npz"] + TRAIN)
    assert r.returncode == 0, r.stderr
    bad = edited(out, no_checksum(more_bits))       # the bits alone: columns the rows do not have
    fits = r"%s: its meta does not fit its rows: %s; prepare it again"
    for cmd in (["-m", "mpinn.prepare", "--verify", "--data", bad], ["-m", "mpinn.train", bad] + TRAIN):
        one_line(run([sys.executable] + cmd), fits % (re.escape(bad), re.escape(
            "its hashing contract's n_columns (2048) is not what its settings give (4096)")))
    bad = edited(out, no_checksum(lambda meta, header: meta.update(categorical=["ad", "site"])))
    one_line(prepare("--verify", "--data", bad), fits % (re.escape(bad), re.escape(
        "categorical columns ['ad', 'site'], its hashing contract's ['site', 'ad']")))

    def fewer_bits(meta, header):       # an edit consistent throughout: only the rows tell (their column ids)
        meta["hashing"].update(bits=10, n_columns=1024)
        header["n_columns"] = 1024
    bad = edited(out, no_checksum(fewer_bits))
    ids = PackedDataset(out)._file.arrays["indices"]
    first = int(np.flatnonzero(ids >= 1024)[0])
    one_line(prepare("--verify", "--data", bad), r"%s: row %d has column id %d, outside the columns its hashing "
                     r"contract gives feature '%s'; prepare it again" % (re.escape(bad), first // 2 + 1, ids[first],
                                                                          ("site", "ad")[first % 2]))


def test_labels_outside_the_classes_are_found_by_verify(tmp_path):
    table, out = packed(tmp_path, classes=("a", "b", "c"))
    y = PackedDataset(out).y
    bad = edited(out, no_checksum(lambda meta, header: meta.update(classes=["a", "b"])))
    one_line(prepare("--verify", "--data", bad), r"%s: row %d has label id 2, which its multiclass task with classes "
             r"\['a', 'b'\] does not have; prepare it again" % (re.escape(bad), int(np.flatnonzero(y == 2)[0]) + 1))


def manifest_of(path, parts):
    """A multi-part dataset's manifest at `path` over packed files `parts` (in its folder), as prepare_parts writes
    one, under the first part's meta."""
    opened = [(os.path.basename(p), PackedDataset(p)) for p in parts]
    meta = {k: v for k, v in opened[0][1].meta.items() if k != "numeric_stats"}        # the first part's rows'
    with open(path, "wb") as f:
        f.write(manifest_bytes(meta, opened))
    return path


def test_verify_checks_a_manifest_and_its_parts(tmp_path):
    _, part = packed(tmp_path)
    whole = manifest_of(str(tmp_path / "whole.mpinn"), [part, part])
    r = prepare("--verify", "--data", whole)
    assert r.returncode == 0 and "checked %s: 800 rows in 2 parts" % whole in r.stdout, r.stderr
    bad = edited(whole, swap)
    one_line(prepare("--verify", "--data", bad), r"%s: its meta \(task, classes, hashing contract, columns\) is not "
             r"what prepare wrote: it does not match its checksum \(an edited or damaged file\); prepare it again"
             % re.escape(bad))
    bad = edited(whole, no_checksum(swap))
    one_line(run([sys.executable, "-m", "mpinn.train", bad, "--model-out", tmp_path / "m.npz"] + TRAIN),
             r"%s: its meta's classes \(\['yes', 'no'\]\) is not that of its part %s \(\['no', 'yes'\]\); prepare it "
             r"again" % (re.escape(bad), re.escape(part)))


def test_a_packed_file_given_to_pack_and_verify_of_a_table_are_one_line(tmp_path):
    table, out = packed(tmp_path)
    one_line(prepare("--data", out, "--out", tmp_path / "again.mpinn"),
             r"%s is packed already: prepare --verify --data %s \(without --out\) checks it" % (out, out))
    one_line(prepare("--verify", "--data", table), r"prepare needs --out \(the packed file to write\), or --verify "
                                                   r"and one packed file to check: --verify --data X.mpinn")


@pytest.mark.launch
@pytest.mark.mpi
def test_parts_packed_by_two_ranks_are_verified_and_an_edited_manifest_refused(tmp_path):
    d = tmp_path / "days"
    d.mkdir()
    for i in range(2):
        write_table(d / ("day%d.csv" % i), seed=i)
    out = str(tmp_path / "days.mpinn")
    r = mpirun(2, ["-m", "mpinn.prepare", "--data", str(d), "--label", "y", "--out", out, "--quiet"])
    assert r.returncode == 0, r.stderr
    r = mpirun(2, ["-m", "mpinn.prepare", "--verify", "--data", out])
    assert r.returncode == 0 and r.stdout.startswith("checked %s: 800 rows in 2 parts (days.mpinn.parts/)" % out), \
        r.stdout + r.stderr
    bad = edited(out, swap, to=str(tmp_path / "days-swapped.mpinn"))     # its parts: days.mpinn.parts/ still
    for cmd in (["-m", "mpinn.prepare", "--verify", "--data", bad],
                ["-m", "mpinn.train", bad, "--model-out", str(tmp_path / "m.npz")] + TRAIN):
        r = mpirun(2, cmd)
        one_line(r, r"%s: its meta \(task, classes, hashing contract, columns\) is not what prepare wrote: it does "
                    r"not match its checksum \(an edited or damaged file\); prepare it again" % re.escape(bad))
