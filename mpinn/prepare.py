"""Entry point: python -m mpinn.prepare [--data FILE] --out DATA.mpinn: hash a table once into a packed file."""
import argparse
import os
import shutil
import sys

from mpinn.core.errors import MpinnError
from mpinn.data import DataSpec, split_names
from mpinn.data.files import FileSet
from mpinn.data.fit.transform import NumericTransform
from mpinn.data.formats.clicktext import ClickTextSource
from mpinn.data.formats.tables import TableSource
from mpinn.data.many import chained_source, check_formats
from mpinn.data.packed.format import PackedDataset
from mpinn.data.packed.pack_parts import prepare_parts
from mpinn.data.packed.parts import open_packed, parts_dir, read_manifest
from mpinn.files.checkpoint import load_model
from mpinn.files.outputs import Claims, check_file
from mpinn.hashing import describe, format_report
from mpinn.host.exits import run_one_process, terminate_as_interrupt
from mpinn.host.heap import steady_heap
from mpinn.host.launch import launched_ranks
from mpinn.settings import messages
from mpinn.data.packed.packer import Progress, prepare  # noqa: F401 - prepare is this entry point's work, and the API's
from mpinn.settings.hashing import hash_spec
from mpinn.settings.options import Parser, add_data_argument, nonneg_float, nonneg_int, positive_int
from mpinn.settings.parse import add_options


def build_parser():
    p = Parser(
        prog="python -m mpinn.prepare",
        description="Read a CSV or Parquet file (or the embedded click log) in chunks, hash its categorical "
                    "columns once and write a packed file (.mpinn) that training reads by row through a memory "
                    "map: python -m mpinn.train --data DATA.mpinn. Click-log text is packed in one streaming pass "
                    "(its task is binary, its --hash-bits default 18); what needs a scan first (--hash-mode split "
                    "or onehot, auto bits of a CSV, a label to learn the classes of, --report) takes two.",
        epilog="Example: python -m mpinn.prepare --data clicks.csv --label clicked --categorical site,ad --numeric price "
               "--hash-mode split --out clicks.mpinn; then python -m mpinn.prepare --data clicks-valid.csv "
               "--like clicks.mpinn --out clicks-valid.mpinn for rows hashed with the same contract. "
               "mpirun -np 4 python -m mpinn.prepare --data days/ --out days.mpinn: four ranks pack the files.")
    add_data_argument(p, ".csv, .parquet or click-log text (the Criteo logs' format, maybe .gz); omitted: the "
                         "embedded click log")
    p.add_argument("--out", type=packed_name, help="packed file to write (.mpinn); under mpirun -np N "
                   "(N > 1): a multi-part dataset, every rank packing its share of the files: OUT is its manifest "
                   "and OUT.parts/ its parts, read as one by train and predict. Omitted with --verify: check the "
                   "packed file --data X.mpinn")
    d = p.add_argument_group("columns")
    add_options(d, names=("format",))     # as in train
    d.add_argument("--label", help="label column")
    d.add_argument("--categorical", default="", help="comma-separated columns to hash")
    d.add_argument("--numeric", default="", help="comma-separated columns used as numbers")
    d.add_argument("--task", default="auto", choices=["auto", "multiclass", "binary", "regression"])
    d.add_argument("--positive-class", metavar="LABEL", help="binary: the label that is 1 (as in train)")
    d.add_argument("--numeric-transform", default="auto", choices=["auto", "standard", "none"],
                   help="the transform fitted to this file's numeric columns and stored in it (as in train; "
                        "--like: the like file's); values are stored as they are")
    d.add_argument("--default-rows", type=positive_int, default=200_000, help="rows of the embedded click log")
    d.add_argument("--default-seed", type=nonneg_int, default=0, help="seed of the embedded click log (>= 0)")
    h = p.add_argument_group("hashing")
    add_options(h, names=("hash_mode", "hash_k", "hash_bits", "hash_seed", "buckets"))     # as in train
    h.add_argument("--like", help="a packed file or model file: use its hashing contract, columns, task and "
                                  "classes (for validation and test files)")
    r = p.add_argument_group("run")
    # 64k rows: peak memory ~120 MB (trick) / ~160 MB (split k=4, 20 features), no slower than bigger chunks
    r.add_argument("--chunk-rows", type=positive_int, default=65_536,
                   help="rows per chunk (bounds memory; default 65536)")
    r.add_argument("--threads", type=positive_int,
                   help="columns hashed in parallel (default min(4, cores); under mpirun, the cores shared among "
                        "the ranks on a machine)")
    r.add_argument("--peer-timeout", type=nonneg_float, default=300, metavar="SECONDS",
                   help="under mpirun -np N or srun: a rank that has given no sign of life for this long (it was "
                        "killed, or its node went down) ends the job, where the launcher would leave the others "
                        "waiting (srun without --kill-on-bad-exit); each rank's sign is a file beside OUT, "
                        "rewritten every few seconds (a network filesystem may show it late by up to a minute: "
                        "keep this well above that); 0: no check (default 300)")
    r.add_argument("--verify", action="store_true", help="re-read the written file and check its checksums; "
                   "without --out, check the packed file (or multi-part dataset) --data X.mpinn: every byte against "
                   "its checksums, its meta (task, classes, hashing contract, columns) against its own checksum and "
                   "against every row's label and column ids")
    r.add_argument("--report", action="store_true", help="print the collision report of every feature")
    r.add_argument("--quiet", action="store_true", help="only errors")
    return p


def packed_name(s):
    """--out: a packed file's name ends in .mpinn."""
    if not s.endswith(".mpinn"):
        raise argparse.ArgumentTypeError("%s: a packed file's name ends in .mpinn" % s)
    return s


def _like(path):
    """(meta) of a packed file or a model file."""
    if path.lower().endswith(".mpinn"):
        return open_packed(path).meta
    return load_model(path)[2]


def _inputs(args):
    """What the options and the files say, before any row is read: (files, columns, spec, hashing, like): the
    FileSet (None: the embedded click log), the label and columns as given (a
    DataSpec), the task, classes and positive class (a DataSpec), the HashSpec, and the --like file's meta."""
    check_file(args.out, "--out")       # one line now, not a traceback after the reading
    hashing = None if args.like else hash_spec(args)       # the options' rules, before any file is opened
    like = _like(args.like) if args.like else None
    if like is not None:
        hashing = hash_spec(args, like.get("hashing"))     # its contract, used as it is (or the options')
    label, categorical, numeric = args.label, args.categorical, args.numeric
    if like is not None and args.data:
        label = label or like.get("label")
        if not categorical and not numeric:
            categorical, numeric = like.get("categorical") or "", like.get("numeric") or ""
    files = None
    if args.data:
        files = FileSet.of(args.data, args.format)      # a file, or several read as one (a directory, a glob)
        if len(files) > 1:
            check_formats(files)
        first = files[0]
        if first.format == "mpinn":
            raise MpinnError(messages.prepare_packed_already(first.path))
        if not first.table:
            raise MpinnError("%s: prepare reads .csv, .parquet or click-log text, not %r" % (first.path, first.format))
        if not label and first.format != "criteo":
            raise MpinnError(messages.needs_label(first.format))
    # a --like file's task, classes and transform are used as they are, as its contract is
    spec = DataSpec(task=like["task"] if like else args.task, classes=like.get("classes") if like else None,
                    positive=args.positive_class)
    return files, DataSpec(label=label, categorical=categorical, numeric=numeric), spec, hashing, like


def run(args):
    steady_heap()       # memory flat in the number of rows, whatever the input's size
    say = (lambda msg: print(msg, flush=True)) if not args.quiet else (lambda msg: None)
    files, columns, spec, hashing, like = _inputs(args)
    with Claims([("--out", args.out, False)]):      # another prepare (or training run) given this --out is refused
        return _pack(args, say, files, columns, spec, hashing, like)


def _pack(args, say, files, columns, spec, hashing, like):
    label, categorical, numeric = columns.label, columns.categorical, columns.numeric
    if files is not None and len(files) > 1:
        source = chained_source(files, columns, args.chunk_rows)
    elif files is not None and files[0].format == "criteo":
        source = ClickTextSource(files[0].path, label, split_names(categorical), split_names(numeric),
                                 chunk_rows=args.chunk_rows)
    else:
        source = TableSource(files[0].path if files is not None else None, label, categorical, numeric, require_label=True,
                             default_rows=args.default_rows, default_seed=args.default_seed,
                             chunk_rows=args.chunk_rows)
    s = prepare(source, args.out, spec, hashing, like.get("transform") if like else None, args.numeric_transform,
                args.threads or min(4, os.cpu_count() or 1), Progress(not args.quiet), args.report)
    if args.verify:
        PackedDataset(args.out, verify=True)
    _drop_old_parts(args.out)
    say("wrote %s: %d rows, %d input columns (%s) + %d dense, task %s, %.1f MB in %.1f s (%.0f rows/s, %s)%s" % (
        args.out, s["rows"], s["n_columns"], describe(s["hashing"]), s["n_dense"], s["task"], s["bytes"] / 1e6,
        s["seconds"], s["rows_per_s"], "one pass" if s["passes"] == 1 else "two passes",
        ", checksums verified" if args.verify else ""))
    return _done(s, args, say)


def _done(s, args, say):
    """The lines after the written line: the transform, the collisions."""
    if s["transform"] is not None:
        say("numeric transform (stored in the file, applied as rows are read): %s"
            % NumericTransform.from_dict(s["transform"]).describe())
    if s.get("collisions"):
        rep = s["collisions"]
        say("collisions: %d of %d distinct values share all their columns with another value of their feature "
            "(%.1f expected for uniform hashing)" % (sum(r["colliding"] for r in rep),
                                                     sum(r["distinct"] for r in rep), sum(r["expected"] for r in rep)))
        if args.report:
            say(format_report(rep))
    return 0


def check(args):
    """prepare --verify --data X.mpinn: a packed file or a multi-part dataset checked whole (opening it checks its
    parts against the manifest and its meta against its checksum and the rows' layout; verify(), every byte against
    its checksums and every row's label and column ids against the meta); one line either way."""
    path = args.data
    if not isinstance(path, str) or not path.lower().endswith(".mpinn"):
        raise MpinnError(messages.prepare_needs_out())
    data = open_packed(path)
    data.verify()
    parts = getattr(data, "parts", None)
    digest = read_manifest(path).get("meta_xxh64") if parts else data._file.header.get("meta_xxh64")
    meta = data.meta
    print("checked %s: %d rows%s, %d input columns (%s) + %d dense, task %s%s; every byte against its checksums, %s "
          "against every row's label and column ids" % (
              path, len(data), " in %d parts (%s.parts/)" % (len(parts), os.path.basename(path)) if parts else "",
              data.n_sparse, describe(meta.get("hashing")), data.raw_dense, meta["task"],
              " (classes %s)" % ", ".join(map(str, meta["classes"][:10])) if meta.get("classes") else "",
              "the meta against its checksum and" if digest else "the meta (written without a checksum, by an older "
              "mpinn: prepare it again to have one)"), flush=True)
    return 0


def _drop_old_parts(out):
    """A dataset written as one file where a multi-part one was: the old parts go."""
    old = parts_dir(out)
    if os.path.isdir(old) and all(n.startswith("part-") and n.endswith(".mpinn") for n in os.listdir(old)):
        shutil.rmtree(old, ignore_errors=True)


def run_ranks(args, comm):
    """Every rank packs its share of the files into a part of a multi-part dataset (mpinn.data.packed.pack_parts)."""
    # start-up: at the top, mpi4py would start MPI for --help and one process's prepare (as in main)
    from mpinn.comm.heartbeat import Heartbeat, folder_for
    steady_heap()
    say = (lambda msg: print(msg, flush=True)) if not args.quiet and comm.rank == 0 else (lambda msg: None)
    if args.out is None:        # --verify of a packed file: rank 0 checks it
        return comm.root_call(lambda: check(args)) or 0
    heartbeat = claims = None
    try:
        inputs, error = _inputs(args), None
        claims = Claims([("--out", args.out, False)]) if comm.rank == 0 else None
        if args.peer_timeout:       # before the first wait (rank 0 may scan every file first)
            heartbeat = Heartbeat(folder_for(args.out), comm.rank, comm.size, args.peer_timeout).start()
    except MpinnError as e:
        inputs, error = None, str(e)
    comm.while_waiting = (lambda: _waiting(heartbeat, args.quiet)) if heartbeat else None
    try:
        errors = comm.allgather_obj(error)      # every rank read the same options and files: one line, from rank 0
        if any(errors):
            raise MpinnError(next(e for e in errors if e), collective=True)
        files, columns, spec, hashing, like = inputs
        if files is None:
            raise MpinnError(messages.prepare_parts_need_files(comm.size), collective=True)
        s = prepare_parts(comm, args.out, files, columns, spec, hashing,
                          like.get("transform") if like else None, args.numeric_transform,
                          args.threads or _threads_per_rank(comm.size), args.quiet, args.report, args.verify,
                          args.chunk_rows, on_rows=(lambda n: setattr(heartbeat, "rows", n)) if heartbeat else None)
    finally:
        if heartbeat:
            heartbeat.stop()
        if claims:
            claims.release()
    if comm.rank != 0:
        return 0
    say("wrote %s: %d rows in %s (%s/, %s), %d input columns (%s) + %d dense, task %s, %.1f MB in %.1f s "
        "(%.0f rows/s, %s)%s" % (
            args.out, s["rows"], plural(s["parts"], "part"), os.path.basename(args.out) + ".parts",
            packed_by(s["parts"], comm.size, len(files)), s["n_columns"], describe(s["hashing"]),
            s["n_dense"], s["task"], s["bytes"] / 1e6, s["seconds"], s["rows_per_s"],
            "rank 0 scanned every file first, then %s in one pass" % (
                "every rank packed its share" if s["parts"] == comm.size else "each rank with files packed its share")
            if s["scanned"] else "one pass on every rank" if s["parts"] == comm.size
            else "one pass on each rank with files", ", checksums verified" if args.verify else ""))
    return _done(s, args, say)


def plural(n, word):
    return "%d %s%s" % (n, word, "" if n == 1 else "s")


def packed_by(parts, ranks, files):
    """Who packed: every rank, or (fewer files than ranks, or a share left empty) the ranks that had files."""
    if parts == ranks:
        return "by %d ranks" % ranks
    return "by %d of the %d ranks: a rank packs whole files, and %s" % (
        parts, ranks, "there %s only %s" % ("is" if files == 1 else "are", plural(files, "file")) if files < ranks
        else "the files' sizes left %s without a share" % plural(ranks - parts, "rank"))


WAITING_EVERY = 30.0     # seconds of a long wait between rank 0's lines on the other ranks' rows


def _waiting(heartbeat, quiet):
    """While a rank waits for the others: a lost peer ends the job (mpinn.comm.heartbeat); rank 0 shows the others'
    rows packed so far on stderr, as the progress lines, every WAITING_EVERY seconds of a long wait."""
    heartbeat.check()
    line = heartbeat.progress_line(WAITING_EVERY) if heartbeat.rank == 0 and not quiet else None
    if line:
        sys.stderr.write("prepare: waiting for the other ranks: %s\n" % line)
        sys.stderr.flush()


def _threads_per_rank(size):
    """Hashing threads of a rank: the machine's cores shared among the ranks on it (the launcher says how many;
    else all of them), at most 4."""
    local = os.environ.get("MPI_LOCALNRANKS") or os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE") or str(size)
    return max(1, min(4, (os.cpu_count() or 1) // max(int(local), 1)))


def main(argv=None):
    args = build_parser().parse_args(argv)
    if launched_ranks()[1] != 1:        # started by an MPI launcher with other ranks (or PMIx: MPI will tell)
        # start-up: mpi4py starts MPI at its import: --help and one process's prepare need none
        from mpinn.comm import Communicator
        from mpinn.comm.guard import run_guarded  # start-up: as mpinn.comm
        comm = Communicator()
        if comm.size > 1:
            terminate_as_interrupt()        # every rank removes its temporary files before the job ends
            return run_guarded(run_ranks, args, comm)
    return run_one_process(run if args.out else check, args)


if __name__ == "__main__":
    sys.exit(main())
