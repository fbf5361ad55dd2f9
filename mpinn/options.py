"""Command-line options: the argument types, the parser that speaks on rank 0 only, and the training
options (shared by python -m mpinn.train, the Python API and the doctor)."""
import argparse
import os

from mpinn.config import MpinnError


def _rank_from_env():
    for var in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        if var in os.environ:
            return int(os.environ[var])
    return 0


class Parser(argparse.ArgumentParser):
    """argparse that speaks on rank 0 only and exits 2 on every rank for a bad option."""

    def _print_message(self, message, file=None):
        if _rank_from_env() == 0:
            super()._print_message(message, file)

    raise_errors = False    # the Python API wants an exception, not an exit

    def parse_known_args(self, args=None, namespace=None):
        """The data file may be given as --data FILE (the documented form, as in predict and prepare)
        or as the first positional argument: one `data` either way, and both at once is an error."""
        ns, rest = super().parse_known_args(args, namespace)
        if hasattr(ns, "data_positional"):
            given = ns.__dict__.pop("data_positional")
            if given is not None:
                if ns.data is not None and ns.data != given:
                    self.error("the data file is given twice (%s and --data %s): give one" % (given, ns.data))
                ns.data = given
        return ns, rest

    def error(self, message):
        """One line, not a usage wall."""
        if self.raise_errors:
            raise MpinnError("%s (see %s --help)" % (message, self.prog))
        self.exit(2, "mpinn: error: %s (see %s --help)\n" % (message, self.prog))


def positive_int(s):
    v = int(s)
    if v <= 0:
        raise argparse.ArgumentTypeError("must be a positive integer, not %s" % s)
    return v


def nonneg_int(s):
    v = int(s)
    if v < 0:
        raise argparse.ArgumentTypeError("must be >= 0, not %s" % s)
    return v


def positive_float(s):
    v = float(s)
    if not v > 0 or v != v or v == float("inf"):
        raise argparse.ArgumentTypeError("must be a positive number, not %s" % s)
    return v


def nonneg_float(s):
    v = float(s)
    if not v >= 0 or v == float("inf"):
        raise argparse.ArgumentTypeError("must be >= 0, not %s" % s)
    return v


def hidden_sizes(s):
    try:
        sizes = tuple(int(x) for x in s.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError("expected comma-separated widths such as 64,32, not %r" % s)
    if any(h <= 0 for h in sizes):
        raise argparse.ArgumentTypeError("layer widths must be positive")
    return sizes


def add_data_argument(group, help):
    """--data FILE, the documented form, and the same file as an optional first positional argument
    (Parser.parse_known_args makes them one `data`)."""
    group.add_argument("--data", metavar="FILE", help=help)
    group.add_argument("data_positional", nargs="?", metavar="FILE", help="the same as --data FILE")


def add_hashing_arguments(group):
    """The hashing options of the CLIs that read tables (train, prepare): --hash-mode, --hash-k,
    --hash-bits, --hash-seed, --buckets."""
    group.add_argument("--hash-mode", default="trick", choices=["trick", "split", "onehot"],
                       help="trick: one column per feature, hash mod 2**bits (default); split: the value's xxh64 "
                            "cut in k slices, one column in each of k blocks per feature; onehot: one column per "
                            "training value, plus one for unseen values")
    group.add_argument("--hash-k", type=int, default=4, help="split: columns per value (default 4)")
    group.add_argument("--hash-bits", type=int, default=None,
                       help="trick: 2**bits columns (default auto: 16 columns per distinct training value of "
                            "all the categorical columns together, between 2^10 and 2^18; 2^18 for the click log)")
    group.add_argument("--hash-seed", type=int, default=0, help="xxh64 seed (default 0)")
    group.add_argument("--buckets", default=None,
                       help="split: buckets per block, N for every feature or feat=N,feat=N "
                            "(default ceil(sqrt(distinct values)))")


def build_train_parser():
    from mpinn.defaults import help_table
    p = Parser(prog="python -m mpinn.train",
               description="Train an MLP data-parallel over MPI ranks. Rank 0 reads and hashes the data "
                           "and scatters each global batch; every rank computes its slice; gradients are "
                           "allreduced (or gathered to rank 0). Run under mpirun -np N.",
               epilog="Without DATA, trains on the embedded synthetic click log (20 categorical features, "
                      "4 numeric, binary label). Example: mpirun -np 2 python -m mpinn.train --data data.csv "
                      "--label y --categorical a,b,c --numeric x1,x2. Defaults by model shape (wide: hashed "
                      "categorical inputs; dense: numeric inputs only; regression: a regression head): "
                      + help_table() + ".")
    d = p.add_argument_group("data")
    add_data_argument(d, ".csv, .parquet, .npz (X, y), .mat (Ng format: X, y in 1..10) or .mpinn (written by "
                         "python -m mpinn.prepare); omitted: the embedded click log")
    d.add_argument("--label", help="CSV label column")
    d.add_argument("--categorical", default="", help="comma-separated CSV columns to hash")
    d.add_argument("--numeric", default="", help="comma-separated CSV columns used as numbers")
    d.add_argument("--task", default="auto", choices=["auto", "multiclass", "binary", "regression"],
                   help="auto: two distinct labels of any kind (0/1, yes/no, '<=50K'/'>50K') are binary, a few "
                        "integers or more than two texts multiclass, other numbers regression")
    d.add_argument("--positive-class", metavar="LABEL",
                   help="binary: the label predicted as 1 (default: the larger of the two, e.g. 1, yes, True, "
                        "'>50K'); named in the output and stored in the model")
    d.add_argument("--numeric-transform", default="auto", choices=["auto", "standard", "none"],
                   help="what numeric inputs go through, fitted on the training file in the reading pass and "
                        "stored in the model: auto (default): log1p first for non-negative heavy-tailed columns "
                        "(skewness > 2, and less skewed after the log), then every column standardised (mean 0, "
                        "std 1; a constant column becomes 0), clipped to the training range; standard: no log; "
                        "none: as they are. In every mode a missing cell (empty, NA, NaN, ?, ...) or a "
                        "non-finite value is imputed with the mean and flagged by an extra 0/1 input, and "
                        "(except none) a regression target is standardised for training")
    d.add_argument("--valid", help="held-out file (same format); default: --holdout of the data")
    d.add_argument("--holdout", type=nonneg_float, default=0.1, help="share of rows held out (default 0.1)")
    add_hashing_arguments(d)        # --hash-mode, --hash-k, --hash-bits, --hash-seed, --buckets
    d.add_argument("--default-rows", type=positive_int, default=200_000,
                   help="rows of the embedded click log (default 200000)")
    m = p.add_argument_group("model")
    m.add_argument("--hidden", type=hidden_sizes, default=(64,), help="hidden widths (default 64)")
    m.add_argument("--activation", default="relu", choices=["relu", "sigmoid", "tanh"])
    m.add_argument("--loss", default="auto", choices=["auto", "softmax", "sigmoid", "squared"],
                   help="head; auto: softmax (multiclass), sigmoid (binary), squared (regression)")
    m.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    o = p.add_argument_group("optimisation")
    o.add_argument("--optimizer", default=None, choices=["sgd", "momentum", "adam", "adagrad", "ftrl"],
                   help="default: by model shape, see the epilog. sgd: p -= lr g. momentum: heavy ball (--momentum). adam: Kingma and Ba (on the hashed "
                        "block lazy: a row's m and v advance only on the steps that touch it, and its bias "
                        "correction counts those steps). adagrad: per element (--adagrad-rowwise: one "
                        "accumulator per hashed row). ftrl: FTRL-Proximal per coordinate (McMahan et al. "
                        "2013; --lr is its alpha, --ftrl-beta, --l1, --l2), the classic click-through-rate "
                        "optimizer; --l1 keeps weights the gradients push to zero at exactly zero (sparse hashed weights). Every optimizer updates only the "
                        "rows of the hashed block a batch touched (see --hashed-update); with several ranks "
                        "on a node, the parameters and the optimizer state are held once for the node and "
                        "each rank updates its part")
    o.add_argument("--hashed-update", default="lazy", choices=["lazy", "dense"],
                   help="lazy (default): each step updates only the hashed block's rows the batch touched, "
                        "and only their optimizer state; weight decay there is lazy L2 (added to the touched "
                        "rows' gradient). For sgd, adagrad and ftrl this equals the dense update exactly; for "
                        "momentum and adam it is their lazy variant. dense: every row every step with the "
                        "exact dense formulas (exact dense Adam, decay of every row), slow for a large table")
    o.add_argument("--lr", type=positive_float, default=None,
                   help="learning rate (default: the model shape's, see the epilog; an optimizer named "
                        "without --lr: sgd 0.3, momentum 0.03, adam 0.002, adagrad 0.01, ftrl 1.0)")
    o.add_argument("--momentum", type=nonneg_float, default=0.9)
    o.add_argument("--weight-decay", type=nonneg_float, default=0.0, help="L2 lambda on weights (not biases)")
    o.add_argument("--adagrad-rowwise", action="store_true",
                   help="adagrad: one accumulator per row of the hashed block (the mean of the row's squared "
                        "gradient is added to it, as FBGEMM's row-wise Adagrad): 1/width of the state")
    o.add_argument("--l1", type=nonneg_float, default=0.0, help="ftrl: L1 strength on the weights, a dead zone |z| <= l1 that holds a weight at exactly zero (default 0)")
    o.add_argument("--l2", type=nonneg_float, default=0.0, help="ftrl: L2 strength on the weights (default 0)")
    o.add_argument("--ftrl-beta", type=nonneg_float, default=1.0, help="ftrl: beta of the per-coordinate "
                   "learning rate alpha / (beta + sqrt(n)) (default 1)")
    o.add_argument("--batch-size", type=positive_int, default=None,
                   help="GLOBAL batch, split over the ranks (default: by model shape, see the epilog)")
    o.add_argument("--batch-per-rank", type=positive_int, default=None,
                   help="instead of --batch-size: rows per rank per step, so the global batch grows "
                        "with the number of ranks")
    o.add_argument("--grad-accum", type=positive_int, default=1, metavar="K",
                   help="compute each rank's share of a step in K micro-batches and add the gradients "
                        "(same step, a K-th of the activation memory)")
    o.add_argument("--lr-scaling", default="none", choices=["none", "linear", "sqrt"],
                   help="scale --lr by (global batch / --lr-base-batch) or its square root")
    o.add_argument("--lr-base-batch", type=positive_int, default=None,
                   help="the global batch --lr was tuned for (default with --batch-per-rank: that batch)")
    o.add_argument("--warmup-steps", type=nonneg_int, default=0,
                   help="ramp the learning rate linearly to its (scaled) value over this many steps")
    o.add_argument("--lr-decay", default=None, choices=["cosine", "step", "none"],
                   help="after warm-up, over the run's steps: cosine (from the rate down to 0 at the last "
                        "step), step (x0.1 at half-way, x0.01 at three quarters) or none (default: by model "
                        "shape). With --resume, a larger --epochs stretches what is left of it")
    o.add_argument("--epochs", type=positive_int, default=None, help="at most this many (default: by model shape)")
    o.add_argument("--early-stop", type=nonneg_int, default=None, metavar="PATIENCE",
                   help="stop when the held-out metric has not improved for PATIENCE epochs (0: never; "
                        "default: by model shape); needs held-out rows")
    o.add_argument("--keep", default="best", choices=["best", "last"],
                   help="the parameters the model file holds: those of the epoch with the best held-out "
                        "metric (default; the last epoch's without held-out rows), or the last epoch's")
    o.add_argument("--stop-metric", default="auto", choices=["auto", "logloss", "auc", "accuracy", "rmse"],
                   help="the held-out metric for --early-stop and --keep best (auto: logloss, rmse for "
                        "regression)")
    o.add_argument("--seed", type=int, default=0, help="initialisation and shuffling seed")
    c = p.add_argument_group("distribution")
    c.add_argument("--reduce", default="allreduce", choices=["allreduce", "gather"],
                   help="allreduce: every rank steps; gather: rank 0 steps and broadcasts (DT42)")
    c.add_argument("--device", default="cpu", choices=["auto", "cpu", "gpu"],
                   help="where every rank computes: cpu (numpy; the default while the GPU path is "
                        "untested on a GPU), gpu (cupy; rank r uses GPU local rank mod device count), "
                        "auto (gpu when cupy imports and finds a device, else cpu)")
    c.add_argument("--comm", default="auto", choices=["auto", "shm", "mpi", "nccl", "cuda-aware", "staged"],
                   help="how gradients travel. CPU: shm (summed in a shared-memory window; every rank "
                        "on one node), mpi (MPI_Allreduce); auto: shm when every rank is on one node, "
                        "else mpi. GPU: nccl, cuda-aware (cupy arrays straight to MPI), staged (through "
                        "pinned host buffers); auto: cuda-aware when MPI says so, else staged")
    c.add_argument("--table", default="auto", choices=["auto", "replicated", "sharded"],
                   help="the hashed block of the first layer: replicated (every rank, or with shared memory "
                        "every node, holds it all), sharded (split by rows over the ranks; each rank holds "
                        "and steps its own rows, a batch's rows are fetched from their owners and their "
                        "gradient rows sent back, with Alltoallv); auto (default): sharded when the job "
                        "spans several nodes or the node's replicas would not fit in half its memory")
    c.add_argument("--input", default="scatter", choices=["scatter", "local"],
                   help="scatter: rank 0 reads (and hashes) the rows and scatters each batch; local: "
                        "every rank reads its own rows of a packed file (python -m mpinn.prepare)")
    c.add_argument("--shuffle-block", type=positive_int, default=1, metavar="B",
                   help="shuffle blocks of B consecutive rows instead of single rows (default 1): a "
                        "packed file is then read in runs of B rows, so its mapped pages stay few "
                        "whatever its size")
    c.add_argument("--no-prefetch", action="store_true",
                   help="do not read and send the next batch while this one computes")
    c.add_argument("--parallel", default="data", choices=["data", "tower"],
                   help="data: one model, gradients combined every step; tower: every rank trains its "
                        "own replica (seed + rank) and predictions are mixed (the wide-sparse seed's mode)")
    c.add_argument("--tower-data", default="shard", choices=["shard", "same"],
                   help="tower mode: each tower trains on its slice of every batch (shard) or on the "
                        "whole batch (same)")
    c.add_argument("--tower-mix", default="mean", choices=["mean", "fit"],
                   help="tower mode: mix the towers' predictions by a plain mean, or with weights fitted "
                        "to the held-out loss")
    c.add_argument("--sparse-threshold", type=nonneg_float, default=0.25,
                   help="send the sparse layer's gradient as rows while the touched rows of all ranks "
                        "are at most this share of the table, else allreduce it dense")
    c.add_argument("--compress", choices=["fp16", "bf16"], default=None,
                   help="send the dense gradient as 16-bit floats (prescaled by 1/N, summed in float32; "
                        "a step whose cast overflows is skipped on every rank); --reduce allreduce only")
    c.add_argument("--average-every", type=nonneg_int, default=0, metavar="K",
                   help="local SGD: no gradient exchange; every rank steps on its own rows and the "
                        "parameters are averaged every K steps and at each epoch end (0: off)")
    c.add_argument("--timeline", metavar="FILE",
                   help="write a Chrome-trace JSON of every rank's phases per step (data wait, "
                        "forward+backward, communication, update), for Perfetto or chrome://tracing")
    c.add_argument("--overlap", action="store_true",
                   help="post the later layers' gradient Allreduce (non-blocking, in buckets) while the "
                        "earlier layers still back-propagate; --reduce allreduce, CPU, no --compress, "
                        "--grad-accum or --average-every")
    f = p.add_argument_group("checkpoints and failure handling")
    f.add_argument("--checkpoint-dir", help="write checkpoints here (rank 0, atomically): every "
                   "--checkpoint-every steps and at each epoch end")
    f.add_argument("--checkpoint-every", type=nonneg_int, default=0,
                   help="steps between checkpoints (default 0: at epoch ends only)")
    f.add_argument("--keep-checkpoints", type=positive_int, default=3, help="keep the newest K (default 3)")
    f.add_argument("--resume", metavar="DIR", help="continue from the newest checkpoint in DIR with the "
                   "same options (--epochs may grow; the number of ranks may change); checkpoints "
                   "go on being written there unless --checkpoint-dir says otherwise")
    f.add_argument("--step-timeout", type=nonneg_float, default=300.0,
                   help="seconds a step, an evaluation or a checkpoint may take before the job is "
                        "aborted as hung (default 300; 0: no deadline)")
    f.add_argument("--start-timeout", type=nonneg_float, default=3600.0,
                   help="seconds for start-up: reading and hashing the data (default 3600; 0: none)")
    f.add_argument("--max-bad-steps", type=positive_int, default=20,
                   help="stop after this many consecutive steps with a non-finite loss or gradient "
                        "(each is skipped on every rank; default 20)")
    r = p.add_argument_group("output")
    r.add_argument("--model-out", default="mpinn-model.npz", help="model file written at the end")
    r.add_argument("--metrics-out", help="write the history and summary as JSON here")
    r.add_argument("--curve", metavar="FILE", help="append each epoch's losses and metrics to FILE "
                   "(.csv: one row per epoch; otherwise JSON lines)")
    r.add_argument("--plot", metavar="PNG", help="at the end, plot the loss and metric curves to PNG "
                   "(needs matplotlib: pip install 'mpinn[plot]')")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.add_argument("--quiet", action="store_true", help="only errors")
    return p
