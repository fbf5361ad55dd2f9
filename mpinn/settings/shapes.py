"""The defaults that depend on what the model looks like: one table, by model shape, and the automatic batch."""
import math

from mpinn.model import periodic
from mpinn.core.spec import ModelSpec

# model shape -> the training defaults for it (what --help lists); measured on real data sets, see
# docs and scripts/real_data.py
SHAPES = {
    # hashed categorical inputs (a wide first layer, most rows untouched by a batch; with the linear part
    # beside the hidden layers): Adagrad's per-weight rate suits a rare value's rows, which move on the
    # few steps that see them. Chosen on seven real data sets (scripts/real_data.py, docs/real-data.md):
    # sgd 0.3 (the earlier default) lost to a logistic regression by 0.037 AUC on movielens tested by time
    "wide": {"optimizer": "adagrad", "lr": 0.05, "epochs": 30, "lr_decay": "none", "early_stop": 3},
    # numeric inputs only. The rate x0.1 after two epochs in a row no better on the held-out rows (twice at most; see
    # mpinn.optim.schedule): Fashion-MNIST (784-800-10, --epochs 10, np 2) 0.8843 test accuracy with a constant rate,
    # its best held-out epoch the 4th, 0.8983 so; cosine decay 0.8998 but 0.9666 on scikit-learn's digits against
    # 0.9805 constant (scripts/bench/pixels.py). Cut after one such epoch, one noisy epoch of a rare class stalled
    # the model (satimage's damp grey soil: test AUC 0.9379, after two 0.9450; scripts/bench/plateau_rule.py)
    "dense": {"optimizer": "adam", "lr": 0.001, "epochs": 30, "lr_decay": "plateau", "early_stop": 3},
    # a regression head (on the standardised target), any inputs
    "regression": {"optimizer": "adam", "lr": 0.003, "epochs": 30, "lr_decay": "none", "early_stop": 3},
}
# A log: hashed inputs and at least this many training rows (the embedded click log has 180,000). Embedding + MLP
# click models overfit from the second pass over a log (Zhang et al., CIKM 2022, "Towards Understanding the
# Overfitting Phenomenon of Deep Click-Through Rate Prediction Models"; here the embedded log's held-out AUC fell
# from 0.816 after epoch 1 to 0.747 after epoch 4, W4's from 0.8454 to 0.8015): one pass, with LOG_POINTS
# held-out checks in it (the epoch's end one of them). Smaller tables keep several epochs and early stopping.
# 4, not 8: each check scores every held-out row. W4, 3M rows with 300k held out, np 2: 8 checks took the run to
# 1.26 times --epochs 1's wall time (26.7 s against 21.1 s), 4 checks to 1.05 and 1.12 (two runs), the same AUC.
LOG_ROWS = 100_000
LOG_POINTS = 4
# A small table: fewer than LOG_ROWS training rows and at most SMALL_TABLE_VALUES numeric input values (rows times
# numeric inputs, bins included). One model's test AUC there depends on its seed (label only, np 2, seeds 0-4: cells
# 0.852 to 0.885, movielens 0.666 to 0.691, diamonds' RMSE 568 to 615), and the average of SMALL_TABLE_MEMBERS seeds'
# models beats their mean on every real set with signal (scripts/bench/real_data.py --seeds 5, docs/models.md), for
# 5 times the training, seconds on such a table. A 60,000-image pixel set (47 million values) keeps one model, and
# so does a model of more than SMALL_TABLE_PARAMS parameters (a wide hashed table: movielens' 2^18 columns make 17
# million, and five of them a 340 MB model file).
SMALL_TABLE_VALUES = 10_000_000
SMALL_TABLE_PARAMS = 2_000_000
SMALL_TABLE_MEMBERS = 5
# --numeric-embedding auto: an ensemble's first member is trained again with periodic embeddings (mpinn.model.periodic) and
# the better on its held-out rows is kept, where there are 2 to 64 numeric columns. No shape of the data told where
# they help (label only, np 2, five models: census income +0.014 test AUC; cells -0.019, diamonds +1.5% RMSE,
# movielens -0.018, fertility -0.005), the held-out rows did on every set with signal but movielens, whose one
# numeric column (the film's year, tested by time) the lower bound leaves out (docs/models.md). The upper bound
# keeps pixel sets out: 784 columns would grow the first layer's inputs 16-fold. And at least EMBED_MIN_ROWS
# training rows: on scikit-learn's bundled tables (under 1,500 rows, 30 to 180 held out; python -m
# scripts.bench.numeric_bins --bins auto --embeddings off,auto,periodic, seeds 0-2) the held-out rows chose them
# where the test then lost (diabetes RMSE 50.8 -> 52.3 on the mean, below the ridge regression's 51.3).
EMBED_MIN_COLUMNS = 2
EMBED_MAX_COLUMNS = 64
EMBED_MIN_ROWS = 10_000
# And at least EMBED_MIN_RARE held-out rows of every class: the held-out logloss of a class seen a few times is
# decided by those few rows. The Open Bandit samples (24,000 training rows, 0.5% clicks: 9 and 12 held-out clicks)
# passed the rows' bound and chose the embeddings on them; the other real sets hold 420 (mplsstops) to 7,700.
EMBED_MIN_RARE = 100
LOSS_OF_TASK = {"multiclass": "softmax", "binary": "sigmoid", "regression": "squared"}
METRIC_OF_TASK = {"multiclass": "logloss", "binary": "logloss", "regression": "rmse"}


def model_shape(n_sparse, task):
    """wide (hashed inputs), dense (numeric inputs only) or regression."""
    if task == "regression":
        return "regression"
    return "wide" if n_sparse else "dense"


def auto_batch(n_train):
    """The global batch for n training rows: about 250 steps an epoch (small data sets need steps more
    than big batches), rounded down to a power of two, between 128 and 1024."""
    return int(min(1024, max(128, 2 ** int(math.floor(math.log2(max(n_train, 1) / 250.0))))))


def help_table():
    """The defaults per shape, for --help."""
    return "; ".join("%s: %s lr %g, %d epochs at most, --lr-decay %s, --early-stop %d" % (
        shape, d["optimizer"], d["lr"], d["epochs"], d["lr_decay"], d["early_stop"])
        for shape, d in SHAPES.items()) + "; every shape: global batch n/250 rounded down to a power of " \
        "two, between 128 and 1024 (about 250 steps an epoch), --keep best, --stop-metric logloss (rmse); a log " \
        "(hashed inputs, %d training rows or more): one epoch, with %d held-out checks inside it (--eval-every)" % (
            LOG_ROWS, LOG_POINTS)


def numeric_columns(info):
    """The data's numeric columns: the batches' first dense inputs (mpinn.data.fit.transform: values, indicators, bins)."""
    return len((info.meta.get("transform") or {}).get("columns") or ())


def embedding_trial(cfg, info):
    """Does --numeric-embedding auto try periodic embeddings on the first member (cfg resolved but for it)?"""
    return (cfg.ensemble > 1 and cfg.parallel == "data" and info.has_valid and info.n_train >= EMBED_MIN_ROWS
            and EMBED_MIN_COLUMNS <= numeric_columns(info) <= EMBED_MAX_COLUMNS
            and (info.held_out_rarest is None or info.held_out_rarest >= EMBED_MIN_RARE))


def model_spec(cfg, info):
    """The model of a resolved configuration for the data's shapes (info: mpinn.data.DataInfo)."""
    lay = info.layout
    emb = cfg.numeric_embedding
    embed = (periodic.spec_of(numeric_columns(info), periodic.sigma_of(emb))
             if emb.startswith("periodic") and lay.n_dense else None)
    return ModelSpec(lay.n_sparse, lay.n_dense, cfg.hidden, info.n_out, cfg.activation, cfg.loss, cfg.dtype,
                     sparse_fan_in=info.fan_in, wide=cfg.wide == "on", periodic=embed)
