"""A run's options in a TOML file (--config FILE.toml; the command line overrides it), and a configuration written back
out as one (--print-config [MODEL]: a model file's stored options, or this command line's), so that a run is
reproduced from its model."""
import difflib
import re

from mpinn.core.errors import MpinnError
from mpinn.files.checkpoint import load_model
from mpinn.settings.table import DATA, GIVEN, OPTIONS

try:
    import tomllib
except ImportError:         # Python < 3.11
    import tomli as tomllib

BY_NAME = {f.name: f for f in OPTIONS}
# what a run writes or continues from: printed commented out, so that giving the file back never replaces the
# original run's files (nor resumes its checkpoints) unasked
OUTPUTS = ("model_out", "metrics_out", "curve", "plot", "timeline", "log_dir", "checkpoint_dir", "resume")
# how the run printed: commented out too (a flag cannot be turned off on the command line, so a file that set it
# would keep every later run from it silent)
PRINTING = ("quiet", "no_progress")


def _is_flag(f):
    return f.metadata["argparse"].get("action") == "store_true"


def _as_text(key, value, path):
    """A TOML value as the text its option takes on the command line (a list: comma-separated)."""
    if isinstance(value, list):
        return ",".join(_as_text(key, v, path) for v in value)
    if isinstance(value, bool):
        raise MpinnError("--config %s: %s takes a value, not %s" % (path, key, str(value).lower()))
    if isinstance(value, (int, float, str)):
        return repr(value) if isinstance(value, float) else str(value)
    raise MpinnError("--config %s: %s is a %s; an option takes a number, text, true/false or a list"
                     % (path, key, type(value).__name__))


def file_argv(path):
    """The options of a TOML file as command-line arguments, each name checked against the option table."""
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except OSError as e:
        raise MpinnError("--config %s: cannot read it (%s)" % (path, e.strerror or e))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise MpinnError("--config %s is not a TOML file: %s" % (path, str(e).splitlines()[0]))
    argv, seen = [], {}
    for key, value in doc.items():
        name = key.replace("-", "_")
        if name not in BY_NAME:
            near = difflib.get_close_matches(name, list(BY_NAME), n=1)
            raise MpinnError("--config %s: unknown option %r%s" % (path, key, " (did you mean %r?)" % near[0]
                                                                     if near else ""))
        if name == "config":
            raise MpinnError("--config %s names another file (config = ...): give its options here" % path)
        if name in seen:
            raise MpinnError("--config %s gives %s twice (%r and %r)" % (path, name, seen[name], key))
        seen[name] = key
        flag = "--" + name.replace("_", "-")
        if name in ("data", "valid") and isinstance(value, list):      # several files: each its own argument
            argv += [flag] + [_as_text(key, v, path) for v in value]
        elif _is_flag(BY_NAME[name]):
            if not isinstance(value, bool):
                raise MpinnError("--config %s: %s is true or false, not %r" % (path, key, value))
            argv += [flag] if value else []
        else:
            argv += [flag, _as_text(key, value, path)]
    return argv, set(seen)


def read_config(path, parser):
    """{option: value} of a TOML file, each value converted and checked as its --flag on the command line is (by
    `parser`, which sets only the options given and raises MpinnError)."""
    argv, names = file_argv(path)
    try:
        ns = parser.parse_args(argv)
    except MpinnError as e:
        # the parser names the flag; in a file the key is what the user wrote
        message = re.sub(r"argument --([a-z0-9-]+)(/[^:]*)?:", lambda m: m.group(1).replace("-", "_") + ":",
                         str(e)).split(" (see ")[0]
        raise MpinnError("--config %s: %s" % (path, message))
    values = vars(ns)
    out = {name: values[name] for name in names if name in values}
    out.update({name: False for name in names if name not in values})      # flags given as false
    return out


def toml_value(v):
    """A value as TOML: true/false, numbers (floats exactly, by repr), text, lists."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v) if v == v else "nan"
    if isinstance(v, (list, tuple)):
        return "[%s]" % ", ".join(toml_value(x) for x in v)
    return '"%s"' % "".join("\\" + c if c in '"\\' else "\\u%04x" % ord(c) if ord(c) < 32 or ord(c) == 127 else c
                            for c in str(v))


def config_toml(values, origin, source):
    """The text of a TOML file that gives a run the options it was given: `values` {option: value} (RunConfig.options()
    or a model file's stored "config"), `origin` {option: given|default|data}. The options given are set; what the
    data and the job chose, and the outputs, are comments (left to the data and the job again, never overwritten)."""
    given, chosen, outputs, printing, gone = [], [], [], [], []
    for name, v in values.items():
        where = origin.get(name)
        if name not in BY_NAME:
            gone.append("# %s = %s   (not an option of this mpinn)" % (name, toml_value(v)))
        elif name == "config" or v is None or where not in (GIVEN, DATA):
            continue
        elif name == "data" and str(v).startswith("<in-memory"):
            given.append("# data = \"FILE\"   (the run was given %s)" % v[1:-1])
        elif where == DATA:
            chosen.append("# %s = %s" % (name, toml_value(v)))
        elif name in OUTPUTS:
            outputs.append("# %s = %s" % (name, toml_value(v)))
        elif name in PRINTING:
            printing.append("# %s = %s" % (name, toml_value(v)))
        else:
            given.append("%s = %s" % (name, toml_value(v)))
    out = ["# mpinn run options: %s" % source,
           "# python -m mpinn.train --config FILE; the command line overrides the file; an option left out is at its "
           "default", ""] + (given or ["# (no option given)"])
    for title, lines in (("what the data and the job chose (they choose again)", chosen),
                         ("what the run wrote: uncomment to write (or resume) it again", outputs),
                         ("how the run printed: uncomment to print so again", printing),
                         ("options this mpinn does not have", gone)):
        if lines:
            out += ["", "# " + title] + lines
    return "\n".join(out) + "\n"


def model_config_toml(path, given=None):
    """The TOML text of the options a model file was trained with (its header's "config" and "config_origin"), those
    in `given` ({option: value}, the command line's) set over them."""
    _, _, meta = load_model(path)
    if not isinstance(meta.get("config"), dict):
        raise MpinnError("--print-config %s: the model holds no run configuration (written by mpinn %s)"
                         % (path, meta.get("written_by", "?")))
    given = given or {}
    values = dict(meta["config"], **given)
    origin = dict(meta.get("config_origin") or {}, **{name: GIVEN for name in given})
    return config_toml(values, origin, "those %s was trained with (mpinn %s)%s" % (
        path, meta.get("written_by", "?"), ", with %s from this command line" % ", ".join(
            "--" + name.replace("_", "-") for name in given) if given else ""))
