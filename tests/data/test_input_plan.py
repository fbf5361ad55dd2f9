"""The input decided once (issue 61): a FileSet says each file's format, compression and state; plan_input, a pure
function of the options, the FileSets and the job, says where the rows live, who reads them and which rows are
held out, and refuses what cannot be read so; the input stage reads the plan, never the options; each decision
has one site in the code."""
import ast
import gzip
import os
import re

import numpy as np
import pytest

from mpinn import settings
from mpinn.core.errors import MpinnError
from mpinn.data.files import STREAM_FROM, FileSet
from mpinn.settings.input_plan import INPUT_RULES, input_files, plan_input

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = os.path.join(ROOT, "mpinn")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("plan")
    rows = "".join("%d,s%d,%g,%d\n" % (i % 2, i % 7, i / 10, i % 5) for i in range(300))
    (d / "a.csv").write_text("y,site,x,day\n" + rows)
    with gzip.open(d / "b.csv.gz", "wt") as f:
        f.write("y,site,x,day\n" + rows)
    (d / "days").mkdir()
    for i in range(3):
        (d / "days" / ("day_%d.csv" % i)).write_text("y,site,x,day\n" + rows)
    np.savez(d / "xy.npz", X=np.zeros((10, 2)), y=np.arange(10) % 2)
    (d / "p.mpinn").write_bytes(b"\0" * 5000)
    return d


def plan_of(size=1, available=None, **options):
    cfg = settings.from_keywords(options.pop("data", None), **options)
    return plan_input(cfg, *input_files(cfg), size, available)


def test_a_file_set_decides_each_file_once_format_compression_state(folder):
    files = FileSet.of([str(folder / "b.csv.gz"), str(folder / "days"), str(folder / "xy.npz")])
    assert files.formats == ["csv", "csv", "csv", "csv", "npz"]
    assert [f.gzip for f in files] == [True, False, False, False, False]
    assert files[0].state == (os.path.getsize(folder / "b.csv.gz"),) + files[0].state[1:]
    assert files.many and files.odd() == str(folder / "xy.npz") and len(files[1:3]) == 2
    assert abs(files[:1].n_estimate - 300) < 30          # a gzipped file's rows, through its compression ratio
    assert not files[:4].streams("auto") and files[:4].streams("on") and not files[:4].streams("off")
    assert STREAM_FROM == 1_000_000


def test_the_plan_is_a_pure_function_of_the_options_the_files_and_the_job(folder):
    cfg = settings.from_keywords(str(folder / "a.csv"), label="y")
    files, valid = input_files(cfg)
    assert plan_input(cfg, files, valid, 3) == plan_input(cfg, files, valid, 3)


@pytest.mark.parametrize("data, options, residency, reading", [
    (None, {}, "memory", "rank0"),
    ("a.csv", {"label": "y"}, "memory", "rank0"),
    ("a.csv", {"label": "y", "stream": "on"}, "streamed", "rank0"),
    ("days", {"label": "y", "stream": "on", "readers": "all"}, "streamed", "readers"),
    ("p.mpinn", {}, "mapped", "rank0"),
    ("p.mpinn", {"input": "local"}, "mapped", "local"),
    ("xy.npz", {}, "memory", "rank0"),
])
def test_where_the_rows_live_and_who_reads_them(folder, data, options, residency, reading):
    plan = plan_of(size=2, data=str(folder / data) if data else None, **options)
    assert (plan.residency, plan.reading) == (residency, reading)
    assert plan.lines()[0].startswith("input: %s (" % residency)
    if reading == "readers":
        assert plan.readers == 2 and "every rank reads its share of the files" in plan.who_reads


@pytest.mark.parametrize("data, options, refusal", [
    ("xy.npz", {"stream": "on"}, r"--stream on: .*xy.npz is not a table file"),
    ("a.csv", {"label": "y", "readers": "2"}, r"--readers 2: the data is read into memory \(about \d+ rows\): "
                                               r"add --stream on"),
    ("a.csv", {"label": "y", "stream": "off", "readers": "all"}, r"--readers all reads table files as a stream"),
    ("a.csv", {"label": "y", "stream": "on", "holdout_by": "time:day"}, r"--holdout-by time:day needs every row"),
    ("days", {"label": "y", "stream": "on", "readers": "3"}, r"--readers 3: more readers than the job's 2 ranks"),
])
def test_what_the_plan_refuses_is_one_line_on_every_rank(folder, data, options, refusal):
    with pytest.raises(MpinnError, match=refusal) as e:
        plan_of(size=2, data=str(folder / data), **options)
    assert e.value.collective


def test_the_refusals_are_a_table_each_rule_of_which_can_break():
    """INPUT_RULES: what the input refuses, one rule a line (as JOB_RULES is for the job), each named and with its
    example; test_what_the_plan_refuses_is_one_line_on_every_rank breaks five of them."""
    names = [r.name for r in INPUT_RULES]
    assert len(set(names)) == len(names) and all(r.example and r.options for r in INPUT_RULES)
    assert {"readers-ranks", "readers-stream-off", "stream-cannot", "readers-in-memory", "stream-label"} == set(names)


def test_a_stream_of_a_csv_needs_its_label(folder):
    with pytest.raises(MpinnError, match=r"a.csv: a CSV file needs --label COLUMN"):
        plan_of(data=str(folder / "a.csv"), stream="on")


def test_which_rows_are_held_out(folder):
    days = str(folder / "days")
    plan = plan_of(data=days, label="y", stream="on", holdout_by="last")       # a log's last file
    assert plan.holdout.kind == "files" and plan.holdout.files.paths == [os.path.join(days, "day_2.csv")]
    assert plan.files.paths == [os.path.join(days, "day_%d.csv" % i) for i in (0, 1)]      # trained on the others
    assert plan.holdout.how() == " (the last file, %s)" % os.path.join(days, "day_2.csv")
    plan = plan_of(data=str(folder / "a.csv"), label="y", valid=str(folder / "b.csv.gz"))
    assert plan.holdout.kind == "files" and plan.holdout.given and not plan.holdout.streamed
    assert plan_of(data=str(folder / "a.csv"), label="y", stream="on", valid=str(folder / "b.csv.gz")).holdout.streamed
    plan = plan_of(data=str(folder / "a.csv"), label="y", holdout_by="group:site", holdout=0.2)
    assert (plan.holdout.kind, plan.holdout.column, plan.holdout.share) == ("group", "site", 0.2)
    assert plan.spec.exclude == ("site",)       # never an input
    assert plan.holdout.how() == " (whole groups of site, about 20%)"
    assert plan_of(data=str(folder / "a.csv"), label="y", holdout=0).holdout.kind == "none"
    assert plan_of().holdout.how(sample_rows=None) == " (a random 10%)"


def test_a_packed_file_larger_than_the_memory_read_in_short_runs_has_its_note(folder):
    assert plan_of(data=str(folder / "p.mpinn"), available=4000, shuffle_block=1).memory_note.startswith(
        "note: %s (0 MB) is larger than the memory this job may use" % (folder / "p.mpinn"))
    assert plan_of(data=str(folder / "p.mpinn"), available=6000, shuffle_block=1).memory_note is None


def attribute_reads(tree, names=("cfg", "args")):
    return [(node.lineno, ast.unparse(node)) for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in names]


def test_no_module_under_data_reads_an_option():
    """mpinn/data/ reads the InputPlan (typed fields), never the run's options (cfg.x, args.x)."""
    found = []
    for folder, _, names in os.walk(os.path.join(PACKAGE, "data")):
        for name in names:
            if name.endswith(".py"):
                with open(os.path.join(folder, name)) as f:
                    found += [(name,) + r for r in attribute_reads(ast.parse(f.read()))]
    assert not found, found


def test_the_check_sees_an_option_read():
    assert attribute_reads(ast.parse("def f(args):\n    return args.readers != '1'\n")) == [(2, "args.readers")]


def sources():
    for folder, _, names in os.walk(PACKAGE):
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path) as f:
                    yield os.path.relpath(path, PACKAGE).replace(os.sep, "/"), f.read()


# each decision: a pattern that makes it, and the one module allowed to (mpinn.bench.w4 writes data: not a reader)
DECISIONS = {
    "file format": (r"def data_format\(|FORMATS\.get\(", {"data/files.py"}),
    "compression": (r"endswith\(\"\.gz\"\)|x1f\\\\x8b", {"data/formats/names.py", "bench/w4.py"}),
    "residency (stream or not)": (r"> STREAM_FROM|STREAM_FROM <", {"data/files.py"}),
    # (the rule tables refuse combinations of these options; the benchmark reads its own --input once)
    "who reads": (r"readers != \"1\"|input == \"local\"", {"settings/input_plan.py", "settings/rules.py",
                                                           "settings/job_rules.py", "bench/run.py"}),
    "--holdout-by's parsing": (r"holdout_by\.partition|def split_holdout_by", {"settings/options.py"}),
    "read like the training set": (r"\.using\(\w*\.get\(\"hashing\"\)\)|\.using\(\w+\[\"hashing\"\]\)",
                                   {"data/spec.py"}),
    "which feed": (r"\b(Feed|StreamFeed|LocalStreamFeed)\(", {"training/feed.py"}),
}


@pytest.mark.parametrize("what", sorted(DECISIONS))
def test_each_input_decision_is_made_at_one_site(what):
    pattern, allowed = DECISIONS[what]
    found = {path for path, text in sources() if re.search(pattern, text)}
    assert found and found <= allowed, "%s decided in %s" % (what, sorted(found - allowed))
