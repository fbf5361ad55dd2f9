"""The option combinations that are refused, each written once, as a table: the rule, the options it
involves, the one-line reason the user sees, and a command that breaks it (tests run every one).

check(cfg) runs the table on a RunConfig: first on the options as given, before the communicator is
made or any data file is opened; again once the device is known (--device auto); and again once the
data's shapes have resolved what was left to them (--task auto, the optimizer by model shape). A rule
whose options are not decided yet (None, auto) does not fire until they are."""
from dataclasses import dataclass
from typing import Callable

from mpinn.core.errors import MpinnError
from mpinn.data import files
from mpinn.data.formats.names import extension
from mpinn.hashing import max_buckets, parse_buckets
from mpinn.optim import REGISTRY
from mpinn.settings.options import split_holdout_by


@dataclass(frozen=True)
class Rule:
    name: str
    options: tuple                  # the options it involves (field names)
    broken: Callable                # RunConfig -> True when the combination is refused
    message: str                    # str.format'ed with c = the config
    example: str                    # options that break it (after --data FILE)
    data: str = "data.csv"          # the kind of data file the example names


def _given(c, *names):
    return any(c.where(n) == "given" for n in names)


def _first_file(c):
    """The data's file (several files, a directory or a glob: the first), or None (the embedded data, arrays, a
    pattern that names nothing: the reader says so, in its own words)."""
    data = c.data
    if isinstance(data, (str, list, tuple)) and files.is_many(data):
        try:
            data = files.expand(data)[0]
        except MpinnError:
            return None
    return data if isinstance(data, str) else None


def _suffix(c):
    """The data file's extension (a .gz one's inner extension), for the messages."""
    data = _first_file(c)
    return extension(data).lstrip(".") if data is not None else ""


def _table(c, *more):
    """Is the data a table (CSV, tab-separated values, Parquet: mpinn.data.files.data_format) or of a format in
    `more`?"""
    path = _first_file(c)
    return path is not None and files.data_format(path) in ("csv", "parquet") + more


def _task_known(c):
    return c.task != "auto"


def _bucket_counts(c):
    b = parse_buckets(c.buckets)
    return [b] if isinstance(b, int) else list((b or {}).values())


def _bucket_columns_unknown(c):
    """Columns --buckets names that --categorical (when given) does not."""
    b, named = parse_buckets(c.buckets), [x.strip() for x in (c.categorical or "").split(",") if x.strip()]
    return isinstance(b, dict) and bool(named) and bool(set(b) - set(named))


def not_with_sharded(c):
    """The options given in c that a sharded table does not combine with (yet), as flags: the rule sharded-table,
    and why --table auto keeps such a run's table replicated (mpinn.settings.plan)."""
    return [flag for flag, on in (("--parallel tower", c.parallel == "tower"),
                                  ("--reduce gather", c.reduce != "allreduce"), ("--compress", bool(c.compress)), ("--overlap", c.overlap),
                                  ("--average-every", bool(c.average_every)), ("--comm shm", c.comm == "shm"),
                                  ("--device gpu", c.device == "gpu")) if on]


def _own_option_rules():
    """An optimizer's own options (the registry's) given while another optimizer runs: refused, not ignored."""
    out = []
    for o in REGISTRY.values():
        if not o.options:
            continue
        other = next(n for n in REGISTRY if n != o.name)
        out.append(Rule(
            "%s-options" % o.name, ("optimizer",) + o.options,
            lambda c, o=o: c.optimizer is not None and c.optimizer != o.name and _given(c, *o.options),
            "%s act%s on --optimizer %s only; this run's optimizer is {c.optimizer}" % (
                ", ".join("--" + x.replace("_", "-") for x in o.options), "" if len(o.options) > 1 else "s",
                o.name),
            "--optimizer %s --%s" % (other, o.options[0].replace("_", "-") + (
                "" if o.options[0] == "adagrad_rowwise" else " 0.5"))))
    return out


RULES = tuple([
    Rule("one-batch", ("batch_size", "batch_per_rank"), lambda c: bool(c.batch_size and c.batch_per_rank),
         "give --batch-size (global) or --batch-per-rank, not both", "--batch-size 64 --batch-per-rank 8"),
    Rule("scaling-base", ("lr_scaling", "lr_base_batch", "batch_per_rank"),
         lambda c: c.lr_scaling != "none" and not (c.lr_base_batch or c.batch_per_rank),
         "--lr-scaling {c.lr_scaling} needs the batch the learning rate was tuned for: give --lr-base-batch, or "
         "--batch-per-rank (then it is that batch)", "--lr-scaling linear"),
    Rule("base-batch-scaling", ("lr_base_batch", "lr_scaling"),
         lambda c: c.lr_base_batch is not None and c.lr_scaling == "none",
         "--lr-base-batch is the batch --lr-scaling scales from: give --lr-scaling linear or sqrt, or leave it "
         "out", "--lr-base-batch 256"),
    Rule("rowwise-lazy", ("adagrad_rowwise", "hashed_update"),
         lambda c: c.adagrad_rowwise and c.hashed_update == "dense",
         "--adagrad-rowwise updates the touched rows of the hashed block (its dense form is the same update): "
         "leave out --hashed-update dense", "--optimizer adagrad --adagrad-rowwise --hashed-update dense"),
    *_own_option_rules(),
    Rule("wide-needs-deep", ("wide", "hidden"), lambda c: c.wide == "on" and not c.hidden,
         "--wide on adds a linear part beside hidden layers; with --hidden '' the model is that linear part "
         "alone: leave out --wide", "--wide on --hidden ''"),
    Rule("tower-checkpoints", ("parallel", "checkpoint_dir", "resume"),
         lambda c: c.parallel == "tower" and bool(c.checkpoint_dir or c.resume),
         "--parallel tower does not write or resume checkpoints yet; leave out --checkpoint-dir / --resume",
         "--parallel tower --checkpoint-dir ckpt"),
    Rule("ensemble-mode", ("ensemble", "parallel"), lambda c: (c.ensemble or 1) > 1 and c.parallel == "tower",
         "--ensemble trains its members with --parallel data (tower mode's towers are an average already): leave "
         "out --parallel tower or --ensemble", "--ensemble 3 --parallel tower"),
    Rule("tower-options", ("tower_data", "tower_mix", "parallel"),
         lambda c: c.parallel != "tower" and _given(c, "tower_data", "tower_mix"),
         "--tower-data and --tower-mix are for --parallel tower", "--tower-mix fit"),
    Rule("compress-allreduce", ("compress", "reduce", "parallel"),
         lambda c: bool(c.compress) and (c.reduce != "allreduce" or c.parallel == "tower"),
         "--compress shrinks the gradient Allreduce: it needs --reduce allreduce and --parallel data",
         "--compress fp16 --reduce gather"),
    Rule("local-sgd-allreduce", ("average_every", "reduce", "parallel"),
         lambda c: bool(c.average_every) and (c.reduce != "allreduce" or c.parallel == "tower"),
         "--average-every needs --reduce allreduce and --parallel data", "--average-every 4 --reduce gather"),
    Rule("local-sgd-checkpoints", ("average_every", "checkpoint_dir", "resume"),
         # between averages the ranks' parameters and optimizer states differ; a checkpoint holds rank 0's
         lambda c: bool(c.average_every) and bool(c.checkpoint_dir or c.resume),
         "--average-every does not write or resume checkpoints yet; leave out --checkpoint-dir / --resume",
         "--average-every 4 --checkpoint-dir ckpt"),
    Rule("compress-or-local-sgd", ("compress", "average_every"), lambda c: bool(c.compress and c.average_every),
         "--compress shrinks the gradient Allreduce, which --average-every replaces: give one of them",
         "--compress fp16 --average-every 4"),
    Rule("overlap", ("overlap", "reduce", "parallel", "grad_accum", "average_every", "compress", "device"),
         lambda c: c.overlap and (c.reduce != "allreduce" or c.parallel == "tower" or c.grad_accum > 1
                                  or bool(c.average_every) or bool(c.compress) or c.device == "gpu"),
         "--overlap needs --reduce allreduce, --parallel data and --device cpu, without --grad-accum, "
         "--average-every or --compress", "--overlap --grad-accum 2"),
    Rule("grad-accum-cpu", ("grad_accum", "device"), lambda c: c.grad_accum > 1 and c.device == "gpu",
         "--grad-accum runs on --device cpu only (for now)", "--grad-accum 2 --device gpu"),
    Rule("sharded-exchange", ("table", "shard_exchange", "hot_rows", "wire_rows"),
         lambda c: c.table == "replicated" and (c.shard_exchange == "node" or c.hot_rows not in ("auto", "off")
                                                or c.wire_rows != "fp32"),
         "--shard-exchange node, --hot-rows K and a --wire-rows other than fp32 are for a sharded table, and this "
         "run's table is replicated (--table auto keeps it replicated on one node): give --table sharded",
         "--table replicated --hot-rows 100"),
    Rule("stale-rows", ("stale_rows", "table", "graph"),
         lambda c: bool(c.stale_rows) and (c.table == "replicated" or c.graph == "on"),
         "--stale-rows fetches a sharded table's rows a step ahead: it needs --table sharded, and not --graph on "
         "(yet)", "--stale-rows 1 --table replicated"),
    Rule("stale-rows-lazy", ("stale_rows", "hashed_update"),
         lambda c: c.stale_rows == 2 and c.hashed_update == "dense",
         "--stale-rows 2 lands a step's table rows after the next batch's compute, which needs the lazy update of the "
         "hashed table: leave out --hashed-update dense (or give --stale-rows 1)",
         "--table sharded --stale-rows 2 --hashed-update dense"),
    Rule("hot-rows-lazy", ("hot_rows", "hashed_update"),
         lambda c: c.hot_rows not in ("auto", "off") and c.hashed_update == "dense",
         "--hot-rows needs the lazy update of the hashed table: leave out --hashed-update dense",
         "--table sharded --hot-rows 100 --hashed-update dense"),
    Rule("sharded-table", ("table", "parallel", "reduce", "compress", "overlap", "average_every", "comm", "device"),
         lambda c: c.table == "sharded" and bool(not_with_sharded(c)),
         "--table sharded does not combine with --parallel tower, --reduce gather, --compress, --overlap, "
         "--average-every, --comm shm or --device gpu (yet)", "--table sharded --reduce gather"),
    Rule("gpu-allreduce", ("device", "reduce", "parallel", "compress"),
         lambda c: c.device == "gpu" and (c.reduce != "allreduce" or c.parallel == "tower" or bool(c.compress)),
         "--device gpu supports --reduce allreduce and --parallel data without --compress; the others run on "
         "--device cpu",
         "--device gpu --reduce gather"),
    Rule("cpu-transport", ("comm", "device"), lambda c: c.comm in ("shm", "mpi") and c.device == "gpu",
         "--comm {c.comm} is for --device cpu; on a GPU it is auto, nccl, cuda-aware or staged",
         "--comm mpi --device gpu"),
    Rule("gpu-transport", ("comm", "device"),
         lambda c: c.comm in ("nccl", "cuda-aware", "staged") and c.device == "cpu",
         "--comm {c.comm} moves GPU buffers, but this run computes on the CPU (--device cpu): give --device gpu, "
         "or --comm auto, shm or mpi", "--comm nccl"),
    Rule("shm-allreduce", ("comm", "reduce", "parallel"),
         lambda c: c.comm == "shm" and (c.reduce != "allreduce" or c.parallel == "tower"),
         "--comm shm sums gradients for --reduce allreduce and --parallel data", "--comm shm --reduce gather"),
    Rule("local-input", ("input", "data"), lambda c: c.input == "local" and _suffix(c) != "mpinn",
         "--input local needs a packed file: python -m mpinn.prepare --data FILE ... --out FILE.mpinn",
         "--input local"),
    Rule("columns-of-arrays", ("label", "categorical", "numeric", "data"),
         lambda c: _suffix(c) in ("npz", "mat") and _given(c, "label", "categorical", "numeric"),
         "--label, --categorical and --numeric name the columns of a CSV or Parquet file; a .{_s} file holds "
         "the arrays X and y", "--label y", "data.npz"),
    Rule("columns-of-packed", ("label", "categorical", "numeric", "data"),
         lambda c: _suffix(c) == "mpinn" and _given(c, "label", "categorical", "numeric"),
         "--label, --categorical and --numeric were chosen when the .mpinn file was packed (python -m mpinn.prepare); "
         "give them to prepare, or train on the CSV or Parquet file", "--label y", "data.mpinn"),
    Rule("buckets-split", ("buckets", "hash_mode"), lambda c: bool(c.buckets) and c.hash_mode != "split",
         "--buckets is for --hash-mode split (this is {c.hash_mode})", "--categorical a --buckets a=3"),
    Rule("buckets-block", ("buckets", "hash_k", "hash_mode"),
         lambda c: c.hash_mode == "split" and bool(c.buckets)
         and max(_bucket_counts(c), default=0) > max_buckets(c.hash_k),
         "--buckets {c.buckets}: a split block holds 1..2^(64/k) buckets (a slice of 64/k bits of the digest), "
         "and --hash-k is {c.hash_k}", "--hash-mode split --hash-k 16 --buckets 17"),
    Rule("buckets-columns", ("buckets", "categorical", "hash_mode"),
         lambda c: c.hash_mode == "split" and bool(c.buckets) and _bucket_columns_unknown(c),
         "--buckets names a column that --categorical ({c.categorical}) does not",
         "--hash-mode split --categorical a --buckets b=3"),
    Rule("holdout-or-valid", ("valid", "holdout"), lambda c: bool(c.valid) and _given(c, "holdout"),
         "--holdout splits the training data when there is no --valid file: give one of them",
         "--valid valid.csv --holdout 0.2"),
    Rule("holdout-by-table", ("holdout_by", "data"),
         lambda c: c.holdout_by not in ("random", "last") and not _table(c, "criteo"),
         "--holdout-by splits by a column of a CSV, Parquet or click-log text file; this data is %s" % "{_s}",
         "--holdout-by time:t", "data.npz"),
    Rule("holdout-by-label", ("holdout_by", "label"),
         lambda c: split_holdout_by(c.holdout_by)[1] in (c.label or None, "label" if _table(c, "criteo") and not
                                                      _table(c) else None),
         "--holdout-by {c.holdout_by}: that column is the label, so the held-out rows would be chosen by it (by "
         "time: the largest labels, often one class); name a time or group column", "--label y --holdout-by time:y"),
    Rule("holdout-by-valid", ("holdout_by", "valid"), lambda c: c.holdout_by != "random" and bool(c.valid),
         "--holdout-by chooses the held-out rows of the data; with --valid FILE they are that file's: give one "
         "of them", "--valid valid.csv --holdout-by time:t"),
    Rule("eval-every-held-out", ("eval_every", "holdout", "valid"),
         lambda c: c.eval_every > 0 and c.holdout == 0 and not c.valid,
         "--eval-every evaluates held-out rows: give --valid FILE or --holdout > 0", "--eval-every 100 --holdout 0"),
    Rule("holdout-by-share", ("holdout_by", "holdout"), lambda c: c.holdout_by != "random" and c.holdout == 0,
         "--holdout-by needs a share to hold out: --holdout > 0", "--holdout-by time:t --holdout 0"),
    Rule("early-stop-held-out", ("early_stop", "holdout", "valid", "parallel"),
         lambda c: bool(c.early_stop) and _given(c, "early_stop") and (
             c.parallel == "tower" or (not c.valid and c.holdout == 0)),
         "--early-stop needs held-out rows (--valid FILE or --holdout > 0) and --parallel data",
         "--early-stop 2 --holdout 0"),
    Rule("keep-best-held-out", ("keep", "holdout", "valid", "parallel"),
         lambda c: c.keep == "best" and _given(c, "keep") and (
             c.parallel == "tower" or (not c.valid and c.holdout == 0)),
         "--keep best keeps the epoch best on held-out rows: give --valid FILE or --holdout > 0, and --parallel data",
         "--keep best --holdout 0"),
    Rule("overwrite-or-resume", ("overwrite_checkpoints", "resume", "checkpoint_dir"),
         lambda c: c.overwrite_checkpoints and (bool(c.resume) or not c.checkpoint_dir),
         "--overwrite-checkpoints starts a run afresh in its --checkpoint-dir; --resume continues one: give "
         "--checkpoint-dir DIR and one of them", "--overwrite-checkpoints --resume ck"),
    Rule("checkpoint-every", ("checkpoint_every", "checkpoint_dir", "resume"),
         lambda c: bool(c.checkpoint_every) and not (c.checkpoint_dir or c.resume),
         "--checkpoint-every needs --checkpoint-dir DIR (or --resume DIR) to write them to",
         "--checkpoint-every 100"),
    Rule("softmax-task", ("loss", "task"), lambda c: c.loss == "softmax" and c.task in ("binary", "regression"),
         "--loss softmax needs a multiclass task (task is {c.task})", "--task binary --loss softmax"),
    Rule("squared-task", ("loss", "task"), lambda c: c.loss == "squared" and c.task == "multiclass",
         "--loss squared needs a regression task (task is {c.task})", "--task multiclass --loss squared"),
    Rule("sigmoid-task", ("loss", "task"), lambda c: c.loss == "sigmoid" and c.task == "regression",
         "--loss sigmoid is a classification head: the task is regression (use --loss squared or auto)",
         "--task regression --loss sigmoid"),
    Rule("positive-class-task", ("positive_class", "task"),
         lambda c: c.positive_class is not None and c.task in ("multiclass", "regression"),
         "--positive-class names the label that is 1 in a binary task (task is {c.task})",
         "--task multiclass --positive-class yes"),
    Rule("missing-labels-format", ("missing_labels", "data"),
         lambda c: c.missing_labels == "drop" and c.data is not None and not _table(c, "npz", "mat"),
         "--missing-labels drop leaves rows out of CSV, Parquet, .npz and .mat files; this data is %s" % "{_s}",
         "--missing-labels drop", "data.mpinn"),
    Rule("classes-task", ("classes", "task"), lambda c: c.classes is not None and c.task == "regression",
         "--classes names a classification's labels: the task is regression", "--task regression --classes a,b"),
    Rule("classes-binary", ("classes", "task"),
         lambda c: c.classes is not None and c.task == "binary" and len(c.classes.split(",")) != 2,
         "--task binary has two classes; --classes names another number: {c.classes}", "--task binary --classes a,b,c"),
    Rule("classes-positive", ("classes", "positive_class"),
         lambda c: None not in (c.classes, c.positive_class) and c.positive_class not in c.classes.split(","),
         "--positive-class {c.positive_class} is not one of --classes {c.classes}", "--classes a,b --positive-class c"),
    Rule("stop-metric-task", ("stop_metric", "task"),
         lambda c: _task_known(c) and c.stop_metric != "auto" and c.task not in {
             "rmse": ("regression",), "auc": ("binary",), "logloss": ("binary", "multiclass"),
             "accuracy": ("binary", "multiclass")}[c.stop_metric],
         "--stop-metric {c.stop_metric} does not exist for a {c.task} task", "--task regression --stop-metric auc"),
])


def check(cfg, rules=RULES):
    """Raise MpinnError (one line, exit code 2, the same on every rank) for the first broken rule."""
    for r in rules:
        if r.broken(cfg):
            raise MpinnError(r.message.format(c=cfg, _s=_suffix(cfg)), collective=True)


# rules that need what only the data can tell (checked when the configuration is resolved)
def check_data(cfg, shapes):
    """The combinations that depend on the data itself: shapes holds n_sparse and has_valid."""
    if cfg.table == "sharded" and not shapes["n_sparse"]:
        raise MpinnError("--table sharded splits the hashed block of the first layer: this model has no "
                         "hashed inputs", collective=True)
    if cfg.lr_decay == "plateau" and cfg.where("lr_decay") == "given" and not shapes["has_valid"]:
        raise MpinnError("--lr-decay plateau needs held-out rows: the data gave none (--valid FILE or --holdout > 0)",
                         collective=True)
    if cfg.keep == "best" and cfg.where("keep") == "given" and not shapes["has_valid"]:
        raise MpinnError("--keep best needs held-out rows: the data gave none (--valid FILE or --holdout > 0)",
                         collective=True)
    if cfg.early_stop and cfg.where("early_stop") == "given" and not shapes["has_valid"]:
        raise MpinnError("--early-stop needs held-out rows: the data gave none (--valid FILE or --holdout > 0)",
                         collective=True)
