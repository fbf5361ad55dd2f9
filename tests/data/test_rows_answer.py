"""The row containers answer what training asks of them, so that it never asks which kind they are (issue 61):
known_length() (rows by position: len(); a stream's and a block reader's: None, their len() an estimate),
first_rows(limit, chunk) (the first rows' hashed input in file order: what --hot-rows counts) and in_order(chunk,
dtype) (every row in file order as Batches of chunk rows: what a held-out evaluation scores). Each is checked
against what the callers did before they asked: take() of consecutive rows for rows by position, a stream's head()
and pieces(), a block reader's blocks()."""
import numpy as np
import pytest
import scipy.sparse as sp

from mpinn.data import DataSpec, HashSpec, load_csv, load_data
from mpinn.data.base import Dataset
from mpinn.data.files import FileSet
from mpinn.data.formats.tables import TableSource
from mpinn.data.many import RowsInBlocks, chained_source
from mpinn.data.packed.format import PackedDataset
from mpinn.data.packed.parts import manifest_bytes
from mpinn.data.stream import open_stream
from mpinn.prepare import prepare
from mpinn.training.hot import count_ids

KW = dict(label="y", categorical=["a", "b"], numeric=["x", "z"])


def lines(n, seed=0):
    rng = np.random.default_rng(seed)
    return ["%d,v%d,w%d,%.4f,%.3f" % (rng.integers(0, 2), rng.integers(0, 40), rng.integers(0, 7), rng.normal(),
                                      rng.exponential()) for _ in range(n)]


def write(path, rows):
    with open(path, "w") as f:
        f.write("\n".join(["y,a,b,x,z"] + rows) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """One CSV file of 700 rows, the same packed (and its rows twice over as a multi-part manifest), and a directory
    of three CSV files of 400 rows each."""
    d = tmp_path_factory.mktemp("rows")
    csv = write(d / "t.csv", lines(700))
    packed = str(d / "t.mpinn")
    prepare(TableSource(csv, chunk_rows=100, **KW), packed, hashing=HashSpec(bits=10))
    part = PackedDataset(packed)
    meta = {k: v for k, v in part.meta.items() if k != "numeric_stats"}
    manifest = str(d / "parts.mpinn")
    with open(manifest, "wb") as f:
        f.write(manifest_bytes(meta, [("t.mpinn", part), ("t.mpinn", part)]))
    days = d / "days"
    days.mkdir()
    rows = lines(1200, seed=1)
    for i in range(3):
        write(days / ("day_%d.csv" % i), rows[400 * i:400 * (i + 1)])
    return {"csv": csv, "packed": packed, "parts": manifest, "days": str(days)}


def by_position(files):
    """Every kind of rows by position: in memory, packed, multi-part, and a packed file's split (a view)."""
    mem = load_csv(files["csv"], DataSpec(**KW), HashSpec(bits=10))
    packed = load_data(files["packed"])
    parts = load_data(files["parts"])
    assert type(parts).__name__ == "PartsDataset" and len(parts) == 1400
    return {"memory": mem, "memory split": mem.split(0.3, 2)[0], "packed": packed,
            "packed split": packed.split(0.3, 2)[0], "parts": parts, "parts split": parts.split(0.25, 1)[1]}


def same_csr(a, b):
    a, b = sp.csr_matrix(a), sp.csr_matrix(b)
    assert a.shape == b.shape
    assert np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices)
    assert np.array_equal(a.data, b.data)


@pytest.mark.parametrize("kind", ["memory", "memory split", "packed", "packed split", "parts", "parts split"])
@pytest.mark.parametrize("limit,chunk", [(257, 100), (10 ** 6, 128), (100, 100), (0, 64)])
def test_rows_by_position_answer_as_take_of_consecutive_rows(files, kind, limit, chunk):
    rows = by_position(files)[kind]
    n = len(rows)
    assert rows.known_length() == n
    blocks = list(rows.first_rows(limit, chunk))
    m = min(n, limit)
    assert [b.shape[0] for b in blocks] == [min(chunk, m - a) for a in range(0, m, chunk)]
    for a, b in zip(range(0, m, chunk), blocks):      # hot.count_ids's take() of each chunk, before it asked
        same_csr(b, rows.take(np.arange(a, min(a + chunk, m))).Xs)
    got = list(rows.in_order(chunk, np.float32))
    want = [rows.take(np.arange(s, min(s + chunk, n)), np.float32) for s in range(0, n, chunk)]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        same_csr(g.Xs, w.Xs)
        assert g.Xd.dtype == np.float32 and np.array_equal(g.Xd, w.Xd) and np.array_equal(g.y, w.y)


def open_days(files, window=300):
    days = FileSet.of(files["days"])
    spec = DataSpec(**KW)
    return open_stream(lambda: list(enumerate(chained_source(days, spec).sources)), spec,
                       HashSpec(bits=10), 500, 0.1, 5, days.n_estimate, window)


@pytest.mark.parametrize("limit", [1, 399, 401, 10 ** 6])
def test_a_stream_answers_from_its_files_in_order(files, limit):
    stream, _ = open_days(files)
    assert stream.known_length() is None and len(stream) > 0          # its len() is an estimate
    got, want = list(stream.first_rows(limit, 64)), list(stream.head(limit))
    assert len(got) == len(want) > 0
    for g, w in zip(got, want):
        same_csr(g, w)
    assert sum(g.shape[0] for g in got) == min(limit, 1200 - 50)      # the sample's 50 held-out rows left out
    pieces = list(stream.pieces())
    for chunk in (64, 1000, 5000):
        batches = list(stream.in_order(chunk, np.float64))
        assert all(b.n == chunk for b in batches[:-1]) and 0 < batches[-1].n <= chunk
        whole = stream.batch(sp.vstack([p.Xs for p in pieces], format="csr"), np.concatenate([p.Xd for p in pieces]),
                             np.concatenate([p.y for p in pieces]), np.float64)
        same_csr(sp.vstack([b.Xs for b in batches], format="csr"), whole.Xs)
        assert np.array_equal(np.concatenate([b.Xd for b in batches]), whole.Xd)
        assert np.array_equal(np.concatenate([b.y for b in batches]), whole.y)


@pytest.mark.parametrize("chunk", [64, 400, 5000])
def test_files_read_a_block_at_a_time_answer_from_their_blocks(files, chunk):
    stream, _ = open_days(files)
    held = RowsInBlocks(FileSet.of(files["days"]), DataSpec(**KW, task=stream.task, classes=stream.meta["classes"]),
                        HashSpec(contract=stream.meta["hashing"]))
    assert held.known_length() is None and len(held) == held.files.n_estimate
    # what evaluate did before it asked: each block taken whole
    want = [rows.take(np.arange(len(rows)), np.float32) for rows in held.blocks(chunk)]
    got = list(held.in_order(chunk, np.float32))
    assert len(got) == len(want) == -(-1200 // chunk)
    for g, w in zip(got, want):
        same_csr(g.Xs, w.Xs)
        assert np.array_equal(g.Xd, w.Xd) and np.array_equal(g.y, w.y)
    every = sp.vstack([w.Xs for w in want], format="csr")
    for limit in (1, 399, 10 ** 6):
        first = list(held.first_rows(limit, chunk))
        same_csr(sp.vstack(first, format="csr"), every[:limit])


def test_count_ids_counts_the_same_ids_by_position_as_streamed(files):
    """--hot-rows counts the first rows' ids: the stream's first rows read whole (their pieces as one data set)
    count as the stream does."""
    stream, _ = open_days(files)
    pieces = list(stream.pieces())
    whole = stream.batch(sp.vstack([p.Xs for p in pieces], format="csr"), None, np.concatenate([p.y for p in pieces]))
    mem = Dataset(whole.Xs, None, whole.y, stream.meta)
    n_rows = stream.n_sparse
    for limit in (1, 333, 10 ** 6):
        a, b = count_ids(stream, n_rows, limit, chunk=100), count_ids(mem, n_rows, limit, chunk=100)
        assert a[1] == b[1] == min(limit, len(mem)) and np.array_equal(a[0], b[0])
