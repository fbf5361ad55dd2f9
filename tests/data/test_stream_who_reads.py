"""The start-up's stream line says who reads, truthfully: with --readers all or K, a gzipped, CSV or Parquet file is
read whole by one reader, so fewer such files than readers leave readers with nothing to read, and the line says
which ranks read and what share of each global batch a step then trains on."""
import json
import shutil

import pytest

from conftest import mpirun, w4_text
from mpinn.data import DataSpec
from mpinn.data.files import FileSet
from mpinn.data.stream_setup import Recipe
from mpinn.data.fragments import fragments_of, reading as dealt_to
from mpinn.settings.input_plan import who_reads


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("who")
    w4_text(d / "plain.tsv", 300)
    for i in range(3):
        w4_text(d / ("day_%d.tsv.gz" % i), 300, 300 * i)
    return d


@pytest.mark.parametrize("names, count, reading", [
    (["day_0.tsv.gz"], 2, [0]), (["day_0.tsv.gz", "day_1.tsv.gz"], 3, [0, 1]),
    (["day_0.tsv.gz", "day_1.tsv.gz", "day_2.tsv.gz"], 2, [0, 1]),     # more files than readers: all read
    (["day_0.tsv.gz", "plain.tsv"], 4, [0, 1, 2, 3])])                  # a plain file is shared by byte ranges
def test_the_readers_that_read_are_those_given_a_file_or_a_byte_range(files, names, count, reading):
    fs = FileSet.of([str(files / n) for n in names])
    recipe = Recipe(fs, DataSpec())
    assert dealt_to(fragments_of(fs), count) == reading      # the plan's word, and what the readers are given
    assert [g for g in range(count) if recipe.reader_sources(g, count)[1]] == reading


def test_the_line_names_the_readers_that_read_and_the_share_of_a_batch_they_train_on():
    assert who_reads(2, 2, [0, 1]) == who_reads(2, 2) == "every rank reads its share of the files and trains on its rows"
    assert who_reads(2, 4, [0]) == (
        "only 1 of the 2 readers has a file to read (rank 0): a gzipped, CSV or Parquet file is read whole, file i "
        "by reader i mod 2, and there is 1; the others read no rows, and each step trains on 1/2 of the global "
        "batch, the share of the readers that read")
    assert who_reads(3, 6, [0, 1]).startswith("only 2 of the 3 readers have a file to read (ranks 0, 2): ")


@pytest.mark.mpi
def test_one_gzipped_file_at_np_2_says_one_reader_reads_and_trains_half_batches(files, tmp_path, launcher):
    """--readers all at np 2 on one .gz file: the stream line says rank 0 alone reads; every training row is trained
    once, in steps of rank 0's half of the global batch (ceil(rows / 64) steps of --batch-size 128)."""
    data = tmp_path / "one"
    data.mkdir()
    shutil.copy(files / "day_0.tsv.gz", data / "day_0.tsv.gz")
    metrics = str(tmp_path / "m.json")
    r = mpirun(2, ["-m", "mpinn.train", "--data", str(data / "day_0.tsv.gz"), "--stream", "on", "--readers", "all",
                   "--sample-rows", "200", "--shuffle-window", "100", "--batch-size", "128", "--epochs", "1",
                   "--hidden", "8", "--ensemble", "1", "--no-progress", "--model-out", str(tmp_path / "m.npz"),
                   "--metrics-out", metrics], timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    line = next(x for x in r.stdout.splitlines() if x.startswith("stream: "))
    assert line.endswith("; only 1 of the 2 readers has a file to read (rank 0): a gzipped, CSV or Parquet file is "
                         "read whole, file i by reader i mod 2, and there is 1; the others read no rows, and each step "
                         "trains on 1/2 of the global batch, the share of the readers that read"), line
    summary = json.load(open(metrics))["summary"]
    rows = 300 - 20                         # the sample's 10% held out
    assert summary["samples"] == rows and summary["global_steps"] == -(-rows // 64)
