"""The command line and the Python API's keywords, both made from the option table (table.RunConfig):
the parser with its --help, from_argv, from_keywords, and the option reference page."""
import argparse
import os
import re
import sys
from dataclasses import replace
from types import MappingProxyType

from mpinn.core.errors import MpinnError
from mpinn.optim import REGISTRY
from mpinn.settings.config_file import config_toml, model_config_toml, read_config
from mpinn.settings.helptext import HelpAction, short_help
from mpinn.settings.job_rules import JOB_RULES
from mpinn.settings.options import Parser
from mpinn.settings.rules import RULES, check
from mpinn.settings.shapes import LOG_POINTS, LOG_ROWS, SHAPES, help_table
from mpinn.settings.table import DEFAULT, GIVEN, GROUPS, OPTIONS, RunConfig


def flag(name):
    return "--" + name.replace("_", "-")


def _shown_default(f):
    v = f.default
    if v is None or v is False or f.metadata["argparse"].get("action"):
        return None
    return ",".join(map(str, v)) if isinstance(v, tuple) else str(v)


def add_options(parser, names=None, suppress=False):
    """The table's options (all, or those in `names`) as arguments of parser, in argument groups."""
    wanted = [f for f in OPTIONS if names is None or f.name in names]
    groups = {}
    for f in wanted:
        g = f.metadata["group"]
        if g not in groups:
            groups[g] = parser.add_argument_group(g) if names is None else parser
        kw = dict(f.metadata["argparse"])
        shown = _shown_default(f)
        kw["help"] = f.metadata["help"] + (" (default %s)" % shown if shown else "")
        kw["default"] = argparse.SUPPRESS if suppress else f.default
        groups[g].add_argument(flag(f.name), **kw)
        if f.name == "data":        # --data FILE, or the same file as the first positional argument
            groups[g].add_argument("data_positional", nargs="*", metavar="FILE",
                                   help="the same as --data FILE; several: read as one, in the order given",
                                   default=argparse.SUPPRESS if suppress else None)
    return parser


def build_parser(suppress=False):
    """python -m mpinn.train's parser (suppress: no defaults, so that only the given options are set)."""
    p = Parser(prog="python -m mpinn.train",
               description="Train an MLP data-parallel over MPI ranks. Rank 0 reads and hashes the data and "
                           "scatters each global batch; every rank computes its slice; gradients are allreduced "
                           "(or gathered to rank 0). Run under mpirun -np N.",
               epilog="Without DATA, trains on the embedded synthetic click log (20 categorical features, 4 numeric, "
                      "binary label). Example: mpirun -np 2 python -m mpinn.train --data data.csv --label y "
                      "--categorical a,b,c --numeric x1,x2. Defaults by model shape (wide: hashed categorical "
                      "inputs; dense: numeric inputs only; regression: a regression head): " + help_table() +
                      ". Option combinations that do not go together are refused before any data is read: see "
                      "docs/options.md.",
               argument_default=argparse.SUPPRESS if suppress else None, add_help=False)
    p.add_argument("-h", "--help", action=HelpAction, text=_short_help,
                   help="the options most runs use, and the defaults by model shape")
    p.add_argument("--help-all", action=HelpAction, text=lambda parser: parser.format_help(),
                   help="every option (this list)")
    p.add_argument("--print-config", nargs="?", const="", default=argparse.SUPPRESS, metavar="MODEL",
                   help="print the options as a TOML file for --config, and exit: those MODEL (a model file) was "
                        "trained with, or without MODEL this command line's")
    return add_options(p, suppress=suppress)


def _short_help(parser):
    """--help: the common options (mpinn.settings.helptext), the defaults by model shape, where the rest are."""
    shapes = "; ".join("%s: %s lr %g, lr decay %s, %d epochs at most (early stop after %d)" % (
        shape, d["optimizer"], d["lr"], d["lr_decay"], d["epochs"], d["early_stop"]) for shape, d in SHAPES.items())
    shapes += "; but a log (hashed inputs, %d training rows or more): 1 epoch, with %d held-out checks in it" % (
        LOG_ROWS, LOG_POINTS)
    rates = ", ".join("%s %g" % (o.name, o.lr) for o in REGISTRY.values())
    return short_help(parser.prog, {f.name: f for f in OPTIONS}, _shown_default, shapes, rates, len(OPTIONS))


def _config(ns, given):
    values = {f.name: getattr(ns, f.name) for f in OPTIONS}
    origin = {f.name: GIVEN if f.name in given else DEFAULT for f in OPTIONS}
    return RunConfig(**values, origin=MappingProxyType(origin))


def _given(argv, raise_errors):
    quiet = build_parser(suppress=True)
    quiet.raise_errors = raise_errors
    return set(vars(quiet.parse_args(argv)))


def from_argv(argv=None, raise_errors=False):
    """The RunConfig of a command line (sys.argv[1:] by default). A bad option: one line and exit 2
    (raise_errors: MpinnError instead)."""
    parser = build_parser()
    parser.raise_errors = raise_errors
    ns = parser.parse_args(argv)
    given = _given(argv, raise_errors)
    if ns.config:
        _merge_file(ns, given, parser)
    cfg = _config(ns, given)
    if hasattr(ns, "print_config"):
        _print_config(parser, cfg, ns.print_config, given)
    return cfg


def _merge_file(ns, given, parser):
    """--config FILE: the file's options (mpinn.settings.config_file), each one the command line does not give."""
    quiet = build_parser(suppress=True)
    quiet.raise_errors = True
    try:
        values = read_config(ns.config, quiet)
    except MpinnError as e:
        parser.error(str(e))
    for name, value in values.items():
        if name not in given:
            setattr(ns, name, value)
    given.update(values)


def _print_config(parser, cfg, model, given):
    """--print-config [MODEL]: a model's options with those this command line gives (`given`) over them, or this
    command line's (checked by the rules), as a TOML file for --config on standard output (rank 0), then exit 0."""
    try:
        if model:
            options = cfg.options()
            text = model_config_toml(model, {name: options[name] for name in sorted(given) if name in options})
        else:
            check(cfg)
            text = config_toml(cfg.options(), dict(cfg.origin), "this command line's")
    except MpinnError as e:
        parser.error(str(e))
    parser._print_message(text, sys.stdout)
    parser.exit(0)


def options_to_argv(data, options):
    """Keyword options as the CLI's arguments: hidden=(64, 32) -> --hidden 64,32; a True flag -> --flag."""
    argv = [] if data is None or not isinstance(data, (str, os.PathLike)) else ["--data", os.fspath(data)]
    for key, value in options.items():
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag(key))
        elif isinstance(value, (list, tuple)):
            argv += [flag(key), ",".join(str(v) for v in value)]
        else:
            argv += [flag(key), str(value)]
    return argv


def from_keywords(data=None, **options):
    """The RunConfig of the Python API's keywords: the CLI's names, types, defaults and messages (as
    MpinnError), but no model file unless model_out names one. data: a path, an in-memory data set (mpinn.data
    Rows), or None."""
    known = {f.name for f in OPTIONS}
    for key in options:
        if key not in known or key == "data":
            raise TypeError("mpinn.api.train() got an unknown option %r (see python -m mpinn.train --help)" % key)
    argv = options_to_argv(data, options)
    cfg = from_argv(argv, raise_errors=True)
    if cfg.where("model_out") != GIVEN:      # the command line's default file is the command line's
        cfg = replace(cfg, model_out=None)
    if data is not None and not isinstance(data, (str, os.PathLike)):
        cfg = replace(cfg, data=data, origin=MappingProxyType(dict(cfg.origin, data=GIVEN)))
    return cfg


def describe(cfg):
    """One line: the options given, and what the data decided (with --flag names), for the start-up output."""
    def show(name):
        v = getattr(cfg, name)
        return ",".join(map(str, v)) if isinstance(v, tuple) else "<in-memory>" if name == "data" and \
            v is not None and not isinstance(v, str) else str(v)
    given = ["%s %s" % (flag(f.name), show(f.name)) if f.metadata["argparse"].get("action") is None
             else flag(f.name) for f in OPTIONS if cfg.where(f.name) == GIVEN]
    decided = ["%s %s" % (flag(f.name), show(f.name)) for f in OPTIONS if cfg.where(f.name) == "data"]
    return "config: given %s; chosen from the data and the job: %s; the rest at their defaults" % (
        " ".join(given) or "nothing", ", ".join(decided) or "nothing")


def check_requirements(cfg):
    """What the options need from this machine, before anything is read (a missing plotting library)."""
    if cfg.plot:
        # memory: training's report module, loaded before rank 0 reads only where --plot asks (as mpinn.api._run)
        from mpinn.files.report import plotting_missing
        missing = plotting_missing()
        if missing:
            raise MpinnError("--plot needs matplotlib: %s" % missing)


def reference_markdown():
    """docs/options.md: every option by group, the defaults by model shape, and the rule table."""
    out = ["# Training options", "",
           "Generated from `mpinn/settings/table.py` (`python scripts/options_reference.py --write`); the same "
           "table makes `python -m mpinn.train --help-all` (and `--help`, the options most runs use) and the "
           "Python API's keywords "
           "(`mpinn.api.train(data, epochs=3, ...)`).", ""]
    for g in GROUPS:
        out += ["## %s" % g.capitalize(), "", "| option | default | what it does |", "|---|---|---|"]
        for f in OPTIONS:
            if f.metadata["group"] == g:
                shown = _shown_default(f)
                choices = f.metadata["argparse"].get("choices")
                what = f.metadata["help"].rstrip(".") + "." + (" One of: %s." % ", ".join(choices) if choices else "")
                if f.metadata["resume"]:
                    what += " May change on --resume."
                shown = '""' if shown == "" else shown
                out.append("| `%s` | %s | %s |" % (flag(f.name), "`%s`" % shown if shown is not None else
                                                   "(from the data)" if f.default is None and f.name in
                                                   ("optimizer", "lr", "batch_size", "epochs", "lr_decay",
                                                    "early_stop", "ensemble") else "-", what.replace("|", "\\|")))
        out.append("")
    out += ["## Defaults by model shape", "",
            "Options left out are chosen by the model's shape, once the data is read:", "",
            "| shape | optimizer | lr | epochs | lr decay | early stop |", "|---|---|---|---|---|---|"]
    for shape, d in SHAPES.items():
        out.append("| %s | %s | %g | %d | %s | %d |" % (shape, d["optimizer"], d["lr"], d["epochs"], d["lr_decay"],
                                                      d["early_stop"]))
    out += ["", "Every shape: the global batch is n/250 rounded down to a power of two, between 128 and 1024.", "",
            "An optimizer named without `--lr` takes its own rate: " +
            ", ".join("%s %g" % (o.name, o.lr) for o in REGISTRY.values()) + ".", "",
            "## Options that do not go together", "",
            "Checked before any data file is opened (and again once the device and the data are known); each "
            "refusal is one line and exit code 2.", "", "| rule | options | refused, for example | message |",
            "|---|---|---|---|"]
    for r in RULES:
        message = re.sub(r"\{c\.(\w+)\}", lambda m: "<%s>" % flag(m.group(1)), r.message).replace("{_s}", "<suffix>")
        out.append("| %s | %s | `--data %s %s` | %s |" % (r.name, ", ".join(flag(o) for o in r.options), r.data,
                                                        r.example, message.replace("|", "\\|")))
    out += ["", "## What a job refuses", "",
            "Checked once the job is probed (its nodes, memory, shared memory, GPUs; before any data is read) and "
            "again when the run is planned (`mpinn.settings.plan`); one line and exit code 2 as well.", "",
            "| rule | options | refused where |", "|---|---|---|"]
    for r in JOB_RULES:
        out.append("| %s | %s | %s |" % (r.name, ", ".join(flag(o) for o in r.options), r.example))
    return "\n".join(out) + "\n"
