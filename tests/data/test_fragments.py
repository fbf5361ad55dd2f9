"""Fragments (mpinn.data.fragments): the fragments split() deals K readers cover every row of the files exactly once,
whatever K, for plain and gzipped click-log text and CSV files (checked against the files read whole); the plan's
readers (mpinn.data.fragments.reading, which mpinn.settings.input_plan.plan_input asks) are those given fragments; a byte range's rows are the lines that begin
in it; the stream line's words are today's."""
import gzip

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from mpinn.data import DataSpec
from mpinn.data.files import FileSet
from mpinn.data.fragments import Fragment, fragments_of, reading as dealt_to, split
from mpinn.data.many import ChainedSource, chained_source
from mpinn.data.stream_setup import Recipe

CSV_SPEC = DataSpec(label="y", categorical=["a"], numeric=["x"])


def click_lines(n, start, seed):
    """n click-log text lines, row ids start.. in I1 (every row told apart)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(start, start + n):
        counts = [str(i)] + ["" if rng.random() < 0.2 else str(rng.integers(0, 50)) for _ in range(12)]
        cats = ["" if rng.random() < 0.1 else "%08x" % rng.integers(0, 2**32) for _ in range(26)]
        out.append("\t".join([str(int(rng.integers(0, 2)))] + counts + cats))
    return out


def csv_lines(n, start, seed):
    rng = np.random.default_rng(seed)
    return ["y,a,x"] + ["%d,v%d,%d" % (rng.integers(0, 2), rng.integers(0, 9), i) for i in range(start, start + n)]


def write(path, lines):
    text = ("\n".join(lines) + "\n").encode("ascii")
    with (gzip.open(path, "wb") if str(path).endswith(".gz") else open(path, "wb")) as f:
        f.write(text)
    return str(path)


@pytest.fixture(scope="module")
def click(tmp_path_factory):
    """Click-log text files: plain and gzipped, of 301, 57, 1 and 240 rows (one of a single line)."""
    d = tmp_path_factory.mktemp("click")
    sizes = [("a.tsv", 301), ("b.tsv.gz", 57), ("c.tsv", 1), ("d.tsv.gz", 40), ("e.tsv", 240)]
    paths, at = [], 0
    for k, (name, n) in enumerate(sizes):
        paths.append(write(d / name, click_lines(n, at, k)))
        at += n
    return paths


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    """CSV files, plain and gzipped."""
    d = tmp_path_factory.mktemp("csv")
    return [write(d / name, csv_lines(n, 1000 * k, k)) for k, (name, n) in
            enumerate([("p.csv", 120), ("q.csv.gz", 75), ("r.csv", 3)])]


def rows(source):
    """The rows a table source reads, in order: (label, numbers, categorical values) each."""
    out = []
    for part in source.parts():
        cols = [c.to_pylist() if hasattr(c, "to_pylist") else list(c) for c in part.cats]
        labels = part.labels.to_pylist() if hasattr(part.labels, "to_pylist") else list(part.labels)
        Xd = part.Xd if part.Xd is not None else np.zeros((part.n, 0))
        for i in range(part.n):
            out.append((str(labels[i]), tuple(np.nan_to_num(Xd[i], nan=-1.0).tolist()), tuple(str(c[i]) for c in cols)))
    return out


def readers_rows(files, spec, k):
    """Each of k readers' rows, its fragments read as one (as a stream's readers read them)."""
    return [rows(ChainedSource.of(mine, spec, chunk_rows=17)) if mine else [] for mine in split(fragments_of(files), k)]


@pytest.mark.parametrize("kind", ["click", "tables"])
@pytest.mark.parametrize("k", [1, 2, 3, 4, 7])
def test_k_readers_fragments_cover_every_row_once(kind, k, request):
    paths = request.getfixturevalue(kind)
    files = FileSet.of(paths)
    spec = DataSpec() if kind == "click" else CSV_SPEC
    whole = rows(chained_source(files, spec, chunk_rows=29))
    got = readers_rows(files, spec, k)
    assert len(whole) == len(set(whole)) and len(whole) > 0      # every row told apart
    assert sorted(r for mine in got for r in mine) == sorted(whole)      # each row by exactly one reader
    for mine in got:                                                        # each reader's rows in file order
        have = set(mine)
        assert mine == [r for r in whole if r in have]


def test_a_file_of_each_kind_split_byte_ranges_and_whole_files_by_the_rule(click, tables):
    files = FileSet.of(click)
    dealt = split(fragments_of(files), 3)
    assert [[f.describe() for f in mine] for mine in dealt] == [
        [click[0] + " (part 1 of 3)", click[1], click[2] + " (part 1 of 3)", click[4] + " (part 1 of 3)"],
        [click[0] + " (part 2 of 3)", click[2] + " (part 2 of 3)", click[3], click[4] + " (part 2 of 3)"],
        [click[0] + " (part 3 of 3)", click[2] + " (part 3 of 3)", click[4] + " (part 3 of 3)"]]
    size = files[0].state[0]
    assert [mine[0].span for mine in dealt] == [(0, size // 3), (size // 3, 2 * size // 3), (2 * size // 3, size)]
    assert [f.splittable for f in fragments_of(files)] == [True, False, True, False, True]
    assert not any(f.splittable for f in fragments_of(FileSet.of(tables)))      # CSV: read whole
    assert [[f.index for f in mine] for mine in split(fragments_of(FileSet.of(tables)), 2)] == [[0, 2], [1]]


@pytest.mark.parametrize("names, k", [(["b"], 2), (["b", "d"], 3), (["b", "d"], 1), (["a"], 4), (["b", "c"], 5),
                                      (["a", "b", "c", "d", "e"], 7), (["d", "b", "d"], 2)])
def test_the_plans_readers_are_those_given_fragments(click, names, k):
    files = FileSet.of([next(p for p in click if p.rsplit("/", 1)[1].startswith(n + ".")) for n in names])
    recipe = Recipe(files, DataSpec())
    given = [r for r in range(k) if recipe.reader_sources(r, k)[1]]
    assert dealt_to(fragments_of(files), k) == given
    assert given == [r for r in range(k) if recipe.reader_sources(r, k)[0]()]      # and what they open


@pytest.mark.parametrize("kind", ["click", "tables"])
def test_a_reader_reads_its_fragments_as_the_rows_before_them_say(kind, request):
    """Recipe.reader_sources: (file index, source) pairs; a byte range's source counts the file's rows before it."""
    paths = request.getfixturevalue(kind)
    files = FileSet.of(paths)
    recipe = Recipe(files, DataSpec() if kind == "click" else CSV_SPEC)
    whole = {i: rows(s) for i, s in recipe.sources()()}
    for r in range(3):
        for i, source in recipe.reader_sources(r, 3)[0]():
            before = source.rows_before() if getattr(source, "span", None) else 0
            got = rows(source)
            assert got == whole[i][before:before + len(got)]


@settings(max_examples=40, deadline=None)
@given(cuts=st.lists(st.integers(0, 10**6), min_size=2, max_size=2))
def test_a_byte_range_holds_the_lines_that_begin_in_it(click, cuts):
    path = click[0]
    with open(path, "rb") as f:
        raw = f.read()
    lo, hi = sorted(c % (len(raw) + 1) for c in cuts)
    starts = [0] + [i + 1 for i, b in enumerate(raw) if b == ord("\n")][:-1]
    files = FileSet.of([path])
    whole = rows(Fragment(files[0]).open(DataSpec()))
    piece = Fragment(files[0], span=(lo, hi), part=(0, 1)).open(DataSpec(), chunk_rows=13)
    assert rows(piece) == [row for row, at in zip(whole, starts) if lo <= at < hi]
    assert piece.seen == (path, files[0].state)          # checked against the file as found
