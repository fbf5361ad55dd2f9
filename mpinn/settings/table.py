"""Every option of a training run, once: its type, default, group, help and whether a resume may change
it (RunConfig's fields). The command line's parser, --help, the Python API's keywords and the option
reference (docs/options.md) are all made from this table (mpinn.settings.parse)."""
import argparse
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Optional

from mpinn.optim import OPTIMIZERS, optimizer_help
from mpinn.optim.schedule import DECAYS, SCALINGS
from mpinn.settings.options import (class_list, hash_seed, hidden_sizes, holdout_by, hot_rows_spec, nonneg_float,
                                    nonneg_int, numeric_bins, numeric_embedding, positive_float, positive_int,
                                    readers_value, stale_depth)
from mpinn.hashing import MAX_BITS, MAX_K, HashSpec, parse_buckets

# where a value came from
GIVEN, DEFAULT, DATA = "given", "default", "data"


def option(default, group, help, resume=False, **argparse):
    """A field that is a command-line option: `--name` (underscores as dashes) with argparse's keywords
    (type, choices, metavar, action); resume=True: may change when a run is resumed."""
    return field(default=default, metadata={"group": group, "help": help, "resume": resume, "argparse": argparse})


def _int_in(s, lo, hi):
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError("must be an integer in %d..%d, not %s" % (lo, hi, s))
    if not lo <= v <= hi:
        raise argparse.ArgumentTypeError("must be in %d..%d, not %s" % (lo, hi, s))
    return v


def trick_bits(s):
    """--hash-bits: trick mode's 2**bits columns, 1..30 bits (column ids are int32)."""
    return _int_in(s, 1, MAX_BITS)


def split_k(s):
    """--hash-k: split mode's slices of the 64-bit digest, 1..16 (each at least 4 bits)."""
    return _int_in(s, 1, MAX_K)


def bucket_counts(s):
    """--buckets: N (every feature) or feature=N,feature=N, each N at least 1; kept as the text given."""
    try:
        b = parse_buckets(s)
    except ValueError:
        raise argparse.ArgumentTypeError("wants N or feature=N,feature=N, not %r" % s)
    if any(n < 1 for n in ([b] if isinstance(b, int) else (b or {}).values())):
        raise argparse.ArgumentTypeError("a bucket count is at least 1, not %r" % s)
    return s


def resolved(default, help):
    """A field no option sets: decided from the data and the job (mpinn.settings.resolve)."""
    return field(default=default, metadata={"group": None, "help": help})


TASKS = ("auto", "multiclass", "binary", "regression")


@dataclass(frozen=True)
class RunConfig:
    """One training run, every decision in one frozen object. Made by mpinn.settings.from_argv or
    from_keywords (the options as given, the rest at their defaults; None: decided from the data),
    checked against the rule table (mpinn.settings.rules) before any data is read, then resolved
    once the data's shapes are known (mpinn.settings.resolve), which returns a new RunConfig.
    origin[name] says where each value came from: given, default, or data."""

    # ------------------------------------------------------------------ data
    config: Optional[str] = option(
        None, "data", "a TOML file of options by name (epochs = 3, hidden = [64, 32], optimizer = \"adam\"); the "
        "command line overrides it; --print-config MODEL writes the options a model was trained with as one",
        resume=True, metavar="FILE.toml")
    data: Any = option(None, "data", ".csv, .parquet, .npz (X, y), .mat (Ng format: X, y in 1..10) or .mpinn "
                       "(written by python -m mpinn.prepare); several files, a directory or a quoted glob: read as one, "
                       "in order; omitted: the embedded click log", metavar="FILE", nargs="+")
    format: str = option("auto", "data", "the data files' format: auto: by extension (.csv, .parquet, .npz, .mat, "
                         ".mpinn), and click-log text told by its first line; criteo: the Criteo logs' text "
                         "(Kaggle's train.txt, the 1TB log's day_N; label, I1..I13, C1..C26, tab-separated, no "
                         "header, maybe .gz): the label, 13 counts and 26 categorical columns need no naming",
                         choices=("auto", "criteo"))
    label: Optional[str] = option(None, "data", "CSV/Parquet label column")
    categorical: str = option("", "data", "comma-separated CSV/Parquet columns to hash")
    numeric: str = option("", "data", "comma-separated CSV/Parquet columns used as numbers")
    task: str = option("auto", "data", "auto: two distinct labels of any kind (0/1, yes/no, '<=50K'/'>50K') are "
                       "binary; more than two texts, a few integers or integer ids (0..k-1, 1..k) multiclass; other "
                       "numbers (a score, a count, an amount) regression",
                       choices=TASKS)
    positive_class: Optional[str] = option(
        None, "data", "binary: the label predicted as 1 (default: the larger of the two, e.g. 1, yes, True, "
        "'>50K'); named in the output and stored in the model", metavar="LABEL")
    classes: Optional[str] = option(
        None, "data", "every class, comma-separated, in the order of the model's outputs (default: the labels "
        "read; a stream's, those of its sample, which a class first met later ends with an error): two make a "
        "binary task (the second predicted as 1 unless --positive-class says), more a multiclass one",
        type=class_list, metavar="A,B,...")
    missing_labels: str = option(
        "refuse", "data", "a row whose label is missing (an empty cell, NA, NaN): refuse: one line naming it, exit 2; "
        "drop: train without it (CSV, Parquet, .npz and .mat files), saying how many", choices=("refuse", "drop"))
    numeric_transform: str = option(
        "auto", "data", "what numeric inputs go through, fitted on the training file in the reading pass and "
        "stored in the model: auto: log1p first for non-negative heavy-tailed columns (skewness > 2, and less "
        "skewed after the log), then every column standardised (mean 0, std 1; a constant column becomes 0), "
        "clipped to the training range; standard: no log; none: as they are. In every mode a missing cell (empty, "
        "NA, NaN, ?, ...) or a non-finite value is imputed with the mean and flagged by an extra 0/1 input, and "
        "(except none) a regression target is standardised for training", choices=("auto", "standard", "none"))
    numeric_bins: str = option(
        "auto", "data", "numeric columns also enter as quantile bins, piecewise-linear (Gorishniy et al. 2022): N "
        "bins per column (2..64) with edges at equal shares of the training rows, fitted in the reading pass and "
        "stored in the model; bin t of edges b0 < ... < bT is 0 below its lower edge, 1 above its upper edge and "
        "linear between; tied edges merge (a 0/1 flag gets none). off: none. auto: 32 bins per column for a table "
        "of 10,000 to a million rows and 2 to 64 numeric columns, none for click logs (the embedded one, "
        "--format criteo) and other data (measured: docs/data.md)",
        type=numeric_bins, metavar="auto|off|N")
    valid: Optional[str] = option(None, "data", "held-out file (same format; several, a directory or a glob: read "
                                  "as one); default: --holdout of the data", metavar="FILE", nargs="+")
    holdout: float = option(0.1, "data", "share of rows held out when there is no --valid", type=nonneg_float)
    holdout_by: str = option(
        "random", "data", "how --holdout picks its rows: random (a seeded share); last (the last rows of the file, "
        "in file order: a log written in time order, any format); time:COLUMN (the last rows by "
        "that column: numbers, or dates written so that they sort, e.g. 2026-11-25; how a model that will "
        "predict the future is judged, click logs above all); group:COLUMN (whole groups held out, e.g. every "
        "row of a user: how a model for new users is judged). CSV and Parquet files; the column is left out of "
        "the inputs that mpinn chooses itself", type=holdout_by, metavar="HOW")
    stream: str = option(
        "auto", "data", "read table files (CSV, Parquet, click-log text; one or many) as a stream: rank 0 reads, hashes "
        "and batches them chunk by chunk at each epoch, with memory bounded whatever the rows; what needs a look at "
        "the data is fitted on the first --sample-rows rows, the held-out rows drawn from them (or --valid), and the "
        "rows shuffled within windows of --shuffle-window rows. auto: on for more than a million rows (estimated "
        "from the files' sizes); off: every row in memory first", choices=("auto", "on", "off"))
    # 500,000 rather than a million: W4 day file (2.5M rows), np 2, first step 3.1 s against 5.1 s, and a later
    # day's test AUC 0.8465 against 0.8456 (docs/data.md, "Streaming")
    sample_rows: int = option(500_000, "data", "a stream's sample: the first N rows, on which the column kinds, the "
                              "task and classes, the numeric statistics and the hashing are fitted, and from which "
                              "--holdout draws the held-out rows", type=positive_int, metavar="N")
    shuffle_window: int = option(1 << 17, "data", "a stream's shuffle: each window of N consecutive rows in a seeded "
                                 "order (the memory rank 0 holds grows with N, not with the rows)",
                                 type=positive_int, metavar="N")
    readers: str = option("1", "data", "who reads a stream: 1: rank 0 reads, hashes and scatters each batch; all: "
                          "every rank reads its share and trains on its own rows, so reading scales with the ranks "
                          "(the model then depends on the number of readers): an N-th of the bytes of each plain "
                          "click-log text file, and gzipped, CSV or Parquet files whole, file i on reader i mod N; "
                          "K: K readers, each the first rank of a group of consecutive ranks, reading its share "
                          "and scattering its rows over its group (one reader a node, say); the model is that of "
                          "--readers all at K ranks", type=readers_value, metavar="1|all|K")
    hash_mode: str = option("trick", "data", "trick: one column per feature, hash mod 2**bits; split: the value's "
                            "xxh64 cut in k slices, one column in each of k blocks per feature; onehot: one column "
                            "per training value, plus one for unseen values", choices=("trick", "split", "onehot"))
    hash_k: int = option(4, "data", "split: columns per value, 1..16 (each a slice of 64/k bits of the value's "
                         "xxh64)", type=split_k)
    hash_bits: Optional[int] = option(
        None, "data", "trick: 2**bits columns, 1..30 bits (default auto: 16 columns per distinct training value of "
        "all the categorical columns together, between 2^10 and 2^18; 2^18 for the click log)", type=trick_bits)
    hash_seed: int = option(0, "data", "xxh64 seed (0..2^64-1)", type=hash_seed)
    buckets: Optional[str] = option(None, "data", "split: buckets per block, N for every feature or feat=N,feat=N "
                                    "(default ceil(sqrt(distinct values)))", type=bucket_counts)
    default_rows: int = option(200_000, "data", "rows of the embedded click log", type=positive_int)
    # ------------------------------------------------------------------ model
    hidden: tuple = option((64,), "model", "hidden widths, comma-separated ('' for none: a linear model)",
                           type=hidden_sizes)
    wide: str = option("auto", "model", "wide and deep (Cheng et al. 2016): the inputs also feed the output "
                       "directly, a linear model trained jointly with the hidden layers (its weights are extra "
                       "columns of the first layer, starting at zero); auto: on when there are hashed inputs and "
                       "hidden layers", choices=("auto", "on", "off"))
    numeric_embedding: str = option(
        "auto", "model", "periodic[:SIGMA]: the numeric columns also enter through periodic embeddings (Gorishniy "
        "et al. 2022, their PLR), learned with the rest: per column, 48 frequencies c (first drawn from N(0, "
        "SIGMA^2), SIGMA 10 unless given), the cosines and sines of 2 pi c x of its standardised value x, a linear "
        "layer to 16 outputs and a ReLU, the outputs beside the other inputs of the first layer. auto: chosen on "
        "the held-out rows where an ensemble is trained (a small table, see --ensemble) of at least 10,000 "
        "training rows, 2 to 64 numeric columns and 100 held-out rows of every class: the first member is trained "
        "without and again with them (the "
        "same seed and held-out rows), and the better by --stop-metric goes for every member; off elsewhere (it "
        "helps some tables and hurts others: docs/models.md)", type=numeric_embedding,
        metavar="auto|off|periodic[:SIGMA]")
    activation: str = option("relu", "model", "hidden activation", choices=("relu", "sigmoid", "tanh"))
    loss: str = option("auto", "model", "head; auto: softmax (multiclass), sigmoid (binary), squared (regression)",
                       choices=("auto", "softmax", "sigmoid", "squared"))
    dtype: str = option("float32", "model", "parameter and compute dtype", choices=("float32", "float64"))
    # ------------------------------------------------------------------ optimisation
    optimizer: Optional[str] = option(
        None, "optimisation", "default: by model shape, see the epilog. " + optimizer_help() + ". Every optimizer "
        "updates only the rows of the hashed block a batch touched (see --hashed-update); with several ranks on a "
        "node, the parameters and the optimizer state are held once for the node and each rank updates its part",
        choices=OPTIMIZERS)
    hashed_update: str = option(
        "lazy", "optimisation", "lazy: each step updates only the hashed block's rows the batch touched, and only "
        "their optimizer state; weight decay there is lazy L2 (added to the touched rows' gradient). For sgd, "
        "adagrad and ftrl at a constant rate this equals the dense update exactly; for momentum and adam it is "
        "their lazy variant. dense: every row every step with the exact dense formulas (exact dense Adam, decay of "
        "every row), slow for a large table", choices=("lazy", "dense"))
    lr: Optional[float] = option(None, "optimisation", "learning rate (default: the model shape's, see the epilog; "
                                 "an optimizer named without --lr: its own default, see --optimizer)",
                                 type=positive_float)
    momentum: float = option(0.9, "optimisation", "momentum: mu", type=nonneg_float)
    weight_decay: float = option(0.0, "optimisation", "L2 lambda on weights (not biases): lambda/2 sum W^2",
                                 type=nonneg_float)
    adagrad_rowwise: bool = option(False, "optimisation", "adagrad: one accumulator per row of the hashed block (the "
                                   "mean of the row's squared gradient is added to it, as FBGEMM's row-wise "
                                   "Adagrad): 1/width of the state", action="store_true")
    l1: float = option(0.0, "optimisation", "ftrl: L1 strength on the weights, a dead zone |z| <= l1 that holds a "
                       "weight at exactly zero", type=nonneg_float)
    l2: float = option(0.0, "optimisation", "ftrl: L2 strength on the weights", type=nonneg_float)
    ftrl_beta: float = option(1.0, "optimisation", "ftrl: beta of the per-coordinate learning rate "
                              "alpha / (beta + sqrt(n))", type=nonneg_float)
    batch_size: Optional[int] = option(None, "optimisation", "GLOBAL batch, split over the ranks (default: by "
                                       "model shape, see the epilog)", type=positive_int)
    batch_per_rank: Optional[int] = option(None, "optimisation", "instead of --batch-size: rows per rank per step, "
                                           "so the global batch grows with the number of ranks", type=positive_int)
    grad_accum: int = option(1, "optimisation", "compute each rank's share of a step in K micro-batches and add "
                             "the gradients (same step, a K-th of the activation memory)", type=positive_int,
                             metavar="K")
    lr_scaling: str = option("none", "optimisation", "scale --lr by (global batch / --lr-base-batch) or its square "
                             "root", choices=SCALINGS)
    lr_base_batch: Optional[int] = option(None, "optimisation", "the global batch --lr was tuned for (default with "
                                          "--batch-per-rank: that batch)", type=positive_int)
    warmup_steps: int = option(0, "optimisation", "ramp the learning rate linearly to its (scaled) value over this "
                               "many steps", type=nonneg_int)
    lr_decay: Optional[str] = option(
        None, "optimisation", "after warm-up, over the run's steps: cosine (from the rate down to 0 at the last "
        "step), step (x0.1 at half-way, x0.01 at three quarters), plateau (x0.1 after every two epochs in a row "
        "whose held-out metric is no better than the best, twice at most) or none (default: by model shape). With "
        "--resume, a larger --epochs stretches what is left of it", choices=DECAYS)
    epochs: Optional[int] = option(None, "optimisation", "at most this many (default: by model shape)",
                                   resume=True, type=positive_int)
    early_stop: Optional[int] = option(
        None, "optimisation", "stop when the held-out metric has not improved for PATIENCE epochs (0: never; "
        "default: by model shape); needs held-out rows", resume=True, type=nonneg_int, metavar="PATIENCE")
    keep: str = option("best", "optimisation", "the parameters the model file holds: those of the best held-out "
                       "evaluation, an epoch's end or an --eval-every point inside one (the last epoch's without "
                       "held-out rows, unless given), or the last epoch's; a resume keeps the best only from a "
                       "checkpoint written with best",
                       resume=True, choices=("best", "last"))
    stop_metric: str = option("auto", "optimisation", "the held-out metric for --early-stop and --keep best (auto: "
                              "logloss, rmse for regression)", choices=("auto", "logloss", "auc", "accuracy", "rmse"))
    seed: int = option(0, "optimisation", "initialisation and shuffling seed (>= 0)", type=nonneg_int)
    ensemble: Optional[int] = option(
        None, "optimisation", "train K models one after another, each with --seed S+k's initialisation and batch "
        "order and all on the rows --seed S holds out, and average their predictions: the model file holds all K, "
        "predict averages them, the held-out metrics reported are the average's; K times the training time (--curve, "
        "--log-dir and the history record the first model). Default: 5 for a small table (fewer than 100,000 "
        "training rows and at most 10 million numeric input values, a model of at most 2 million parameters, "
        "--parallel data, not a stream), whose one model's quality depends on its seed; 1 otherwise",
        type=positive_int, metavar="K")
    # ------------------------------------------------------------------ distribution
    reduce: str = option("allreduce", "distribution", "allreduce: every rank steps; gather: rank 0 steps and "
                         "broadcasts (DT42)", resume=True, choices=("allreduce", "gather"))
    device: str = option("cpu", "distribution", "where every rank computes: cpu (numpy; the default while the GPU "
                         "path is untested on a GPU), gpu (cupy; rank r uses GPU local rank mod device count), auto "
                         "(gpu when cupy imports and finds a device, else cpu)", resume=True,
                         choices=("auto", "cpu", "gpu"))
    comm: str = option("auto", "distribution", "how gradients travel. CPU: shm (summed in a shared-memory window; "
                       "every rank on one node), mpi (MPI_Allreduce); auto: shm when every rank is on one node, else "
                       "mpi. GPU: nccl, cuda-aware (cupy arrays straight to MPI), staged (through pinned host "
                       "buffers); auto: cuda-aware when MPI says so, else staged", resume=True,
                       choices=("auto", "shm", "mpi", "nccl", "cuda-aware", "staged"))
    table: str = option("auto", "distribution", "the hashed block of the first layer: replicated (every rank, or "
                        "with shared memory every node, holds it all), sharded (split by rows over the ranks; each "
                        "rank holds and steps its own rows, a batch's rows are fetched from their owners and their "
                        "gradient rows sent back, with Alltoallv); auto: sharded when the job spans several nodes "
                        "or the node's replicas would not fit in half its memory", resume=True,
                        choices=("auto", "replicated", "sharded"))
    shard_exchange: str = option("auto", "distribution", "how a sharded table's rows travel: flat (every rank "
                                 "to every owner), node (the ranks of a node combine their requests; between "
                                 "nodes one message per pair of ranks of the same local index; the same results, "
                                 "bit for bit); auto: node from 4 nodes of more than one rank on (the same number "
                                 "on each), flat below", resume=True, choices=("auto", "flat", "node"))
    hot_rows: str = option("off", "distribution", "a sharded table's most frequent rows held by every rank (no fetch; "
                           "their owners dealt round robin, the values refreshed after each step): a number of "
                           "rows, off, or auto: on several nodes, the rows expected at least 4 times in a rank's "
                           "share of a batch (counted over the first training rows), at most 8 MiB of them",
                           resume=True, type=hot_rows_spec, metavar="auto|off|K")
    input: str = option("scatter", "distribution", "scatter: rank 0 reads (and hashes) the rows and scatters each "
                        "batch; local: every rank reads its own rows of a packed file (python -m mpinn.prepare)",
                        resume=True, choices=("scatter", "local"))
    shuffle_block: int = option(1, "distribution", "shuffle blocks of B consecutive rows instead of single rows: a "
                                "packed file is then read in runs of B rows, so its mapped pages stay few whatever "
                                "its size", type=positive_int, metavar="B")
    no_prefetch: bool = option(False, "distribution", "do not read and send the next batch while this one computes",
                               resume=True, action="store_true")
    parallel: str = option("data", "distribution", "data: one model, gradients combined every step; tower: every "
                           "rank trains its own replica (seed + rank) and predictions are mixed (the wide-sparse "
                           "seed's mode)", choices=("data", "tower"))
    tower_data: str = option("shard", "distribution", "tower mode: each tower trains on its slice of every batch "
                             "(shard) or on the whole batch (same)", choices=("shard", "same"))
    tower_mix: str = option("mean", "distribution", "tower mode: mix the towers' predictions by a plain mean, or "
                            "with weights fitted to the held-out loss", choices=("mean", "fit"))
    sparse_threshold: float = option(0.25, "distribution", "send the sparse layer's gradient as rows while the "
                                     "touched rows of all ranks are at most this share of the table, else allreduce "
                                     "it dense", resume=True, type=nonneg_float)
    compress: Optional[str] = option(None, "distribution", "send the dense gradient as 16-bit floats (prescaled by "
                                     "1/N, summed in float32; a step whose cast overflows is skipped on every rank)",
                                     resume=True, choices=("fp16", "bf16"))
    average_every: int = option(0, "distribution", "local SGD: no gradient exchange; every rank steps on its own "
                                "rows and the parameters are averaged every K steps and at each epoch end (0: off)",
                                type=nonneg_int, metavar="K")
    timeline: Optional[str] = option(None, "distribution", "write a Chrome-trace JSON of every rank's phases per "
                                     "step (data wait, forward+backward, communication, update), for Perfetto or "
                                     "chrome://tracing", resume=True, metavar="FILE")
    overlap: bool = option(False, "distribution", "post the later layers' gradient Allreduce (non-blocking, in "
                           "buckets) while the earlier layers still back-propagate", action="store_true")
    wire_rows: str = option("fp32", "distribution", "a sharded table's rows and gradient rows on the wire: fp32; bf16 "
                            "(half the bytes, each row rounded to nearest even by its sender); int8 (each row as 8-bit "
                            "integers and a float32 scale: 68 bytes a 64-wide row); bf16-int8 or int8-bf16 (rows as "
                            "the first, gradient rows as the second); ids as int32 with any; the table and its state "
                            "keep their precision", choices=("fp32", "bf16", "int8", "bf16-int8", "int8-bf16"))
    stale_rows: int = option(0, "distribution", "1: a sharded table's rows fetched a step ahead, overlapping the "
                             "previous batch's compute (batch s+1 sees the rows after update s-1); 2: the gradient "
                             "rows' return overlaps the next compute too (batch s+1 sees the rows after update s-2); "
                             "the dense layers stay synchronous; deterministic (docs/scale.md). --table sharded; 0: "
                             "off", resume=True, type=stale_depth, metavar="0|1|2")
    graph: str = option("auto", "distribution", "a GPU rank's step as one captured CUDA graph, replayed with no "
                        "host wait (auto: where the step plan covers the run, else eager with the reason on the "
                        "device line; on: refuse a run it does not cover; off: eager)", choices=("auto", "on", "off"))
    # ------------------------------------------------------------------ checkpoints and failure handling
    checkpoint_dir: Optional[str] = option(None, "checkpoints", "write checkpoints here (rank 0, atomically): every "
                                           "--checkpoint-every steps and at each epoch end", resume=True)
    checkpoint_every: int = option(0, "checkpoints", "steps between checkpoints (0: at epoch ends only)",
                                   resume=True, type=nonneg_int)
    keep_checkpoints: int = option(3, "checkpoints", "keep the newest K of this run's", resume=True,
                                   type=positive_int)
    overwrite_checkpoints: bool = option(False, "checkpoints", "start afresh in a --checkpoint-dir that holds "
                                         "checkpoints of an earlier run, deleting them (without it such a "
                                         "directory is refused: --resume continues that run)", resume=True,
                                         action="store_true")
    resume: Optional[str] = option(None, "checkpoints", "continue from the newest checkpoint in DIR with the same "
                                   "options (--epochs may grow; the number of ranks may change, not a stream's "
                                   "number of readers: --readers all at N ranks resumes at N ranks, or as --readers N "
                                   "on more); checkpoints go on being written there unless --checkpoint-dir says "
                                   "otherwise", resume=True,
                                   metavar="DIR")
    step_timeout: float = option(300.0, "checkpoints", "seconds a step, an evaluation or a checkpoint may take "
                                 "before the job is aborted as hung (0: no deadline)", resume=True,
                                 type=nonneg_float)
    start_timeout: float = option(3600.0, "checkpoints", "seconds for start-up: reading and hashing the data "
                                  "(0: none)", resume=True, type=nonneg_float)
    max_bad_steps: int = option(20, "checkpoints", "stop after this many consecutive steps with a non-finite loss "
                                "or gradient (each is skipped on every rank)", resume=True, type=positive_int)
    # ------------------------------------------------------------------ output
    model_out: str = option("mpinn-model.npz", "output", "model file written at the end", resume=True)
    metrics_out: Optional[str] = option(None, "output", "write the history and summary as JSON here", resume=True)
    curve: Optional[str] = option(None, "output", "append each epoch's losses and metrics to FILE (.csv: one row "
                                  "per epoch, and per --eval-every point; otherwise JSON lines)", resume=True,
                                  metavar="FILE")
    eval_every: int = option(0, "output", "also evaluate the held-out rows every N steps inside each epoch (0: at "
                             "epoch ends only): a line each, and a row in --curve with the step, the rows seen and "
                             "the seconds since the start (how a one-pass click log is watched; a log's default: a "
                             "quarter of its one epoch); --keep best may keep such a point, early stop counts epoch "
                             "ends only", resume=True, type=nonneg_int, metavar="N")
    plot: Optional[str] = option(None, "output", "at the end, plot the loss and metric curves to PNG (needs "
                                 "matplotlib: pip install 'mpinn[plot]')", resume=True, metavar="PNG")
    log_dir: Optional[str] = option(None, "output", "write TensorBoard event files here (rank 0): the training loss, "
                                    "the held-out metrics and samples/s at each evaluation, the time split at the end "
                                    "(tensorboard --logdir DIR)", resume=True, metavar="DIR")
    no_progress: bool = option(False, "output", "no progress bar", resume=True, action="store_true")
    quiet: bool = option(False, "output", "only errors", resume=True, action="store_true")

    # ------------------------------------------------------------------ resolved (no option sets these)
    batch: int = resolved(0, "the global batch (from --batch-size, or --batch-per-rank x ranks)")
    model_shape: str = resolved("", "wide (hashed inputs), dense (numeric inputs only) or regression")
    table_why: str = resolved("", "why the hashed table is replicated or sharded")
    target_scale: float = resolved(1.0, "regression: the label's scale (held-out RMSE in the label's units)")
    stage: str = resolved("given", "given: as made from the options; resolved: after mpinn.settings.resolve")
    origin: Any = field(default_factory=lambda: MappingProxyType({}), compare=False, repr=False)   # name -> where from

    def where(self, name):
        """Where the value of `name` came from: given, default, or data."""
        return self.origin.get(name, DEFAULT)

    @property
    def hashing(self):
        """The HashSpec the readers hash categorical columns with (the rule table has checked the options;
        mpinn.settings.hashing.hash_spec checks them for prepare)."""
        return HashSpec(self.hash_mode, self.hash_bits, self.hash_seed, self.hash_k, parse_buckets(self.buckets))

    @property
    def towers(self):
        """tower mode: the towers' data (shard or same); None for data parallelism."""
        return self.tower_data if self.parallel == "tower" else None

    def options(self):
        """{name: value} of every option (JSON-able values: hidden as a list, in-memory data named)."""
        out = {}
        for f in OPTIONS:
            v = getattr(self, f.name)
            if isinstance(v, tuple):
                v = list(v)
            elif f.name == "data" and v is not None and not isinstance(v, str):
                v = "<in-memory %s of %d rows>" % (type(v).__name__, len(v))
            out[f.name] = v
        return out


OPTIONS = tuple(f for f in fields(RunConfig) if f.metadata.get("group"))
RESOLVED = tuple(f for f in fields(RunConfig) if "group" in f.metadata and f.metadata["group"] is None)
GROUPS = ("data", "model", "optimisation", "distribution", "checkpoints", "output")
