"""DataSpec: which columns of a data file are what, and what its label means, as the readers take it."""
from dataclasses import dataclass, replace
from typing import Optional


def split_names(s):
    """Column names from 'a,b,c' or a list of them."""
    if isinstance(s, (list, tuple)):
        return [str(c) for c in s]
    return [c.strip() for c in s.split(",") if c.strip()] if s else []


@dataclass(frozen=True)
class DataSpec:
    """What the readers need to know of a data file besides how to hash it (mpinn.hashing.HashSpec).
    Columns are names, given as a list or as 'a,b,c'; none named (categorical and numeric both empty):
    a CSV's or Parquet file's are chosen from their values, a click-log text file's are all of them.
    `classes` given (a model's, or the training file's for its held-out file) are used as they are, in
    their order; otherwise the task and classes are learnt from the labels."""
    label: Optional[str] = None         # the label column of a CSV or Parquet file
    categorical: tuple = ()             # columns to hash
    numeric: tuple = ()                 # columns read as numbers
    exclude: tuple = ()                 # never chosen as inputs when none are named (the --holdout-by column)
    task: str = "auto"                  # auto | binary | multiclass | regression
    classes: Optional[list] = None      # the classes in order; None: learnt from the labels
    positive: Optional[str] = None      # binary: the label that is 1 (default: the larger of the two)
    require_label: bool = True          # False: a file without labels is read (predicting)
    format: str = "auto"                # auto: by extension and first line; criteo: click-log text
    missing_labels: str = "refuse"      # a row whose label is missing: refuse (one line), drop (left out:
    #                                     train --missing-labels drop) or keep (as unknown: NaN, or -1 for a
    #                                     multiclass id, labels.labelled; predict reads so and scores the rest)

    def __post_init__(self):
        for name in ("categorical", "numeric", "exclude"):
            object.__setattr__(self, name, tuple(split_names(getattr(self, name))))


def read_like(train_meta, spec, hashing):
    """(spec, hashing) that read another set as a training set was read (train_meta: its rows' meta, or a model's):
    its columns (a missing one named by the reader), task, classes and hashing contract over `spec`'s other
    choices (LightGBM's reference=). The one place a set is read like the training set: held-out files, a
    stream's readers, predict."""
    columns = {k: train_meta[k] for k in ("categorical", "numeric") if train_meta.get(k) is not None}
    return (replace(spec, task=train_meta.get("task"), classes=train_meta.get("classes"), **columns),
            hashing.using(train_meta.get("hashing")))
