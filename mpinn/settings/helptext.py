"""python -m mpinn.train --help: the options most runs use, grouped, each in a line or two, with the defaults by model
shape; --help-all and docs/options.md list every option of the table (mpinn.settings.table)."""
import argparse
import sys
import textwrap

# (group, [(option, what it does, in a few words)]): the common options, in the order a new user reaches for them
COMMON = (
    ("data", (
        ("data", "the data: .csv (.csv.gz), .tsv, .parquet, .npz (X, y), .mat, a packed .mpinn or click-log text; also "
                 "the first argument; omitted: the embedded click log"),
        ("label", "the label column of a CSV or Parquet file"),
        ("categorical", "comma-separated columns to hash (default: chosen from the values, with --numeric)"),
        ("numeric", "comma-separated columns read as numbers"),
        ("task", "binary, multiclass or regression (default auto: from the labels)"),
        ("valid", "a held-out file, read as the data is"),
        ("holdout", "else the share of rows held out"),
        ("holdout_by", "random, last, time:COLUMN or group:COLUMN"),
    )),
    ("model", (
        ("hidden", "hidden widths, e.g. 64,32 ('' for a linear model)"),
        ("wide", "a linear part beside the hidden layers (auto: with hashed inputs)"),
    )),
    ("training", (
        ("optimizer", "sgd, momentum, adam, adagrad or ftrl (default: by model shape, below)"),
        ("lr", "learning rate (default: the shape's with its optimizer; an optimizer named alone: its own, below)"),
        ("batch_size", "the global batch, split over the ranks (default: n/250 as a power of two, 128..1024)"),
        ("epochs", "at most this many (default: by model shape, below; a log: 1)"),
        ("early_stop", "epochs without a better held-out metric before stopping (0: never)"),
        ("seed", "initialisation and shuffling seed"),
    )),
    ("outputs and runs", (
        ("model_out", "the model file, written at the end (atomically; the line that says so says when it "
                      "replaced one)"),
        ("metrics_out", "the history and summary as JSON"),
        ("checkpoint_dir", "write checkpoints here"),
        ("resume", "continue from the newest checkpoint in DIR"),
        ("config", "options from a TOML file (the command line overrides it)"),
        ("no_progress", "no progress bar"),
        ("quiet", "only errors"),
    )),
)


def common_names():
    return [name for _, options in COMMON for name, _ in options]


# metavars for the short list (the table's are argparse's: the option's name in capitals)
METAVARS = {"label": "COLUMN", "categorical": "COLUMNS", "numeric": "COLUMNS", "holdout": "SHARE", "hidden": "WIDTHS",
            "lr": "RATE", "batch_size": "N", "epochs": "N", "seed": "N", "model_out": "FILE", "metrics_out": "FILE",
            "checkpoint_dir": "DIR"}


def _fill(text, width=79):
    return "\n".join(textwrap.fill(part, width) for part in text.split("\n"))


def short_help(prog, fields, shown_default, defaults_by_shape, own_rates, n_options):
    """The text of --help: the common options in their groups, then the defaults, then where the rest are.
    fields: {name: the table's field}; shown_default(field): its default as text, or None."""
    p = argparse.ArgumentParser(
        prog=prog, add_help=False,
        formatter_class=lambda prog: argparse.RawDescriptionHelpFormatter(prog, max_help_position=28, width=79),
        usage="mpirun -np N %(prog)s [--data] FILE [--label COLUMN] [options]",
        description=_fill("Train a neural network data-parallel over MPI ranks: rank 0 reads and hashes the data "
                          "and scatters each batch, every rank computes its share, the gradients are summed. The "
                          "options most runs use:"),
        epilog=_fill("Defaults by model shape (from the data: wide has hashed inputs, dense numeric ones only, "
                     "regression a numeric label): %s.\nAn optimizer named without --lr takes its own rate: %s.\n\n"
                     "All %d options (hashing, optimizer details, distribution, failure handling, outputs) and the "
                     "combinations refused before any data is read: %s --help-all, or docs/options.md." % (
                         defaults_by_shape, own_rates, n_options, prog)))
    p.add_argument("-h", "--help", action="store_true", help="this list; --help-all: every option")
    for group, options in COMMON:
        g = p.add_argument_group(group)
        for name, what in options:
            f = fields[name]
            kw = {k: v for k, v in f.metadata["argparse"].items() if k in ("metavar", "action")}
            if name in METAVARS:
                kw["metavar"] = METAVARS[name]
            elif "choices" in f.metadata["argparse"] and "metavar" not in kw:
                kw["metavar"] = "{%s}" % ",".join(f.metadata["argparse"]["choices"])
            shown = shown_default(f) if "(default" not in what else None
            g.add_argument("--" + name.replace("_", "-"), help=what + (" (default %s)" % shown if shown else ""),
                           **kw)
    return p.format_help()


class HelpAction(argparse.Action):
    """-h/--help or --help-all: print text() (on rank 0: the parser speaks there only) and exit 0."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None, text=None):
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)
        self.text = text

    def __call__(self, parser, namespace, values, option_string=None):
        parser._print_message(self.text(parser), sys.stdout)
        parser.exit()
