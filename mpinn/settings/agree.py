"""The ranks' agreement on their options, once, before anything else: a digest of every rank's options compared in one
small collective, and where they differ one line naming the option and its value on which ranks."""
import hashlib
import json

from mpinn.core.errors import MpinnError
from mpinn.settings.table import OPTIONS

# not compared: --config names a file whose options are compared themselves
NOT_COMPARED = ("config",)


def compared(cfg):
    """{name: value} of the options every rank must share, JSON-able. In-memory data is not compared: rank 0's rows
    are read (the API's and the estimators' contract), the other ranks' are not looked at."""
    values = cfg.options()
    if cfg.data is not None and not isinstance(cfg.data, (str, list, tuple)):
        values["data"] = None
    return {f.name: values[f.name] for f in OPTIONS if f.name not in NOT_COMPARED}


def digest(values):
    return hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()[:16]


def agree(cfg, allgather, error=None):
    """Every rank was given the same options (allgather: every rank's object in rank order, mpinn.comm.topology's
    start_gather), else a MpinnError every rank raises, naming the first option that differs. One collective of 16
    bytes a rank; a second, of the options themselves, only where they differ. error: this rank's options could not
    be read (cfg None; the command line's line): every rank raises it, with its rank where the others read theirs."""
    got = allgather(("error", error) if error is not None else digest(compared(cfg)))
    failed = [(rank, g[1]) for rank, g in enumerate(got) if isinstance(g, tuple)]
    if failed:
        rank, line = failed[0]
        raise MpinnError(line if len(failed) == len(got) else "rank %d: %s" % (rank, line), collective=True)
    if len(set(got)) > 1:
        raise MpinnError(disagreement(allgather(compared(cfg))), collective=True)


def disagreement(everyone):
    """The line for every rank's compared options (a list in rank order), of which some differ."""
    differ = [f.name for f in OPTIONS if f.name in everyone[0] and len({json.dumps(v.get(f.name), default=str)
                                                                       for v in everyone}) > 1]
    name = differ[0]
    by_value = {}
    for rank, values in enumerate(everyone):
        by_value.setdefault(json.dumps(values.get(name), default=str), []).append(rank)
    where = ", ".join("%s on %s" % (_shown(everyone[ranks[0]].get(name)), _ranks(ranks)) for ranks in by_value.values())
    more = " (and %s)" % ", ".join("--" + n.replace("_", "-") for n in differ[1:]) if len(differ) > 1 else ""
    return ("the ranks were started with different options: --%s is %s%s; give every rank the same options"
            % (name.replace("_", "-"), where, more))


def _shown(value):
    if value is None:
        return "not given"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list):
        return ",".join(map(str, value)) or "''"
    return str(value)


def _ranks(ranks):
    """[0, 1, 2, 5] -> 'ranks 0-2, 5'; [3] -> 'rank 3'."""
    runs = []
    for r in ranks:
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(
        str(a) if a == b else "%d-%d" % (a, b) for a, b in runs)
