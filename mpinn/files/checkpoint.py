"""Model files: one .npz (no pickles) with the flat parameters and a JSON header; written atomically."""
import json
import os
import re
import tempfile
from dataclasses import MISSING, fields

import numpy as np

from mpinn import __version__
from mpinn.device.backend import to_host
from mpinn.files.outputs import made_parent, writes_fail_not_kill
from mpinn.host.launch import follow_umask
from mpinn.core.errors import MpinnError
from mpinn.core.spec import ModelSpec

FORMAT = "mpinn-model-1"


def save_model(path, params, spec, meta):
    """Write params + spec + meta to path via a temporary file, fsync and rename: a reader sees
    the old file or the new one, never half of one."""
    header = {"format": FORMAT, "version": __version__, "spec": spec.to_dict(), "meta": meta}
    _write_npz_atomically(made_parent(path), ".tmp-", header, {"params": params})


def _write_npz_atomically(path, prefix, header, arrays):
    """header (JSON) + arrays (host copies) into path: temporary file in the same directory,
    fsync, rename. A crash leaves the old file or the new one, and at most a stray temporary; a failed write (a
    full disk, a file-size limit) raises its OSError and leaves no temporary."""
    writes_fail_not_kill()
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".npz", dir=os.path.dirname(os.path.abspath(path)))
    try:
        with os.fdopen(fd, "wb") as f:       # closed whatever happens next
            follow_umask(f.fileno())
            np.savez(f, header=np.array(json.dumps(header)),
                     **{k: np.ascontiguousarray(to_host(v)) for k, v in arrays.items()})
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_model(path):
    """(params, spec, meta); any unreadable, truncated or foreign file is a clear MpinnError."""
    if not os.path.exists(path):
        raise MpinnError("model file %s does not exist" % path)
    not_npz = _not_an_archive(path)
    if not_npz:
        raise MpinnError("model file %s is not a model written by mpinn.train (an .npz archive): %s" % (path, not_npz))
    try:
        with np.load(path, allow_pickle=False) as z:
            header = json.loads(str(z["header"][()]))
            params = z["params"]
    except ValueError as e:
        raise MpinnError("%s: refused (it holds pickled objects or is not a model file: %s)" % (path, e))
    except (OSError, EOFError, KeyError, json.JSONDecodeError) as e:
        raise MpinnError("%s is not a readable mpinn model file (%s)" % (path, e))
    except Exception as e:  # zipfile.BadZipFile and friends on truncated files
        raise MpinnError("%s is not a readable mpinn model file (%s: %s)" % (path, type(e).__name__, e))
    check_format(path, header)
    return params, spec_of(path, header), dict(header.get("meta") or {}, written_by=header.get("version", "?"))


def _not_an_archive(path):
    """Why `path` is not a zip archive (what every .npz is), from its first bytes; None when it may be one."""
    try:
        with open(path, "rb") as f:
            head = f.read(512)
    except OSError as e:
        return "it cannot be read (%s)" % (e.strerror or e)
    if head.startswith(b"PK"):
        return None
    if not head:
        return "it is empty"
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return "its first bytes are not an archive's"
    first = text.splitlines()[0] if text.splitlines() else ""
    return "it holds text (it starts %r: a data file?)" % (first[:40] + ("..." if len(first) > 40 else ""))


def check_format(path, header):
    """This mpinn reads model files of FORMAT and older; a newer or foreign one is refused, naming both."""
    fmt, by = header.get("format"), header.get("version", "an unknown version")
    m = re.match(r"^mpinn-model-(\d+)$", str(fmt))
    if m is None:
        raise MpinnError("%s is not an mpinn model file (format %r; this mpinn %s reads %s)"
                         % (path, fmt, __version__, FORMAT))
    if int(m.group(1)) > int(FORMAT.rsplit("-", 1)[1]):
        raise MpinnError("%s was written by mpinn %s in format %s; this mpinn %s reads %s and older: upgrade mpinn"
                         % (path, by, fmt, __version__, FORMAT))


def spec_of(path, header):
    """The ModelSpec of a model file, or one line naming what this mpinn does not know or misses."""
    d = header.get("spec")
    if not isinstance(d, dict):
        raise MpinnError("%s has no model architecture (spec) in its header" % path)
    known = {f.name for f in fields(ModelSpec)}
    needed = {f.name for f in fields(ModelSpec) if f.default is MISSING and f.default_factory is MISSING}
    extra, missing = sorted(set(d) - known), sorted(needed - set(d))
    if extra or missing:
        raise MpinnError("%s (written by mpinn %s) has an architecture this mpinn %s cannot read: %s" % (
            path, header.get("version", "?"), __version__,
            "; ".join(p for p in ("fields it does not know: %s" % ", ".join(extra) if extra else "",
                                  "fields missing: %s" % ", ".join(missing) if missing else "") if p)))
    try:
        return ModelSpec.from_dict(d)
    except (TypeError, ValueError) as e:
        raise MpinnError("%s: its architecture is not valid (%s)" % (path, e))


# ---------------------------------------------------------------- training checkpoints
CHECKPOINT_FORMAT = "mpinn-checkpoint-1"
# ckpt-<run>-<step>.npz: the run's identity (a hash of what a resume must match), so that a directory
# shared by two runs keeps each run's files apart; ckpt-<step>.npz from before identities: no run
_CKPT = re.compile(r"^ckpt-(?:([0-9a-f]{12})-)?(\d{9})\.npz$")


def checkpoint_path(directory, step, run=None):
    return os.path.join(directory, "ckpt-%s%09d.npz" % (run + "-" if run else "", step))


def list_checkpoints(directory, run=None):
    """(step, path) of the finished checkpoints in directory (of run `run` only, when given), oldest first
    (temporary files, left by a writer that died mid-write, are not checkpoints)."""
    if not os.path.isdir(directory):
        return []
    found = [(int(m.group(2)), os.path.join(directory, name))
             for name in os.listdir(directory) for m in [_CKPT.match(name)] if m and (run is None or m.group(1) == run)]
    return sorted(found)


# member-<k>: the checkpoints of an ensemble's member k (2..K), below the run's directory (member 1 writes there)
TRIAL_DIR = "trial-periodic"       # --numeric-embedding auto's second run of the first member (training.ensemble)
_MEMBER = re.compile(r"^(member-\d+|%s)$" % TRIAL_DIR)


def member_dir(directory, k):
    """Where the checkpoints of an ensemble's member k (0-based; k >= 1) go."""
    return os.path.join(directory, "member-%d" % (k + 1))


def member_dirs(directory):
    """The ensemble members' checkpoint directories below `directory` (the periodic trial's too)."""
    if not os.path.isdir(directory):
        return []
    return [os.path.join(directory, name) for name in sorted(os.listdir(directory)) if _MEMBER.match(name)]


def _temporary_prefix(run=None):
    return ".tmp-ckpt-" + (run + "-" if run else "")


def remove_stale_temporaries(directory, run=None):
    """The temporary files a writer killed mid-write left behind (they are never checkpoints): run `run`'s only,
    when given (another run writing into the same directory at this moment keeps its own)."""
    if os.path.isdir(directory):
        for name in os.listdir(directory):
            if name.startswith(_temporary_prefix(run)):
                os.unlink(os.path.join(directory, name))


def save_checkpoint(directory, step, arrays, header, keep=3, run=None):
    """Write ckpt-<run>-<step>.npz atomically (temporary file, fsync, rename, fsync of the directory), then
    delete all but this run's newest `keep` (another run's files are never touched). A crash at any moment
    leaves the previous checkpoints intact and at most one stray temporary file, which the next save
    removes."""
    os.makedirs(directory, exist_ok=True)
    remove_stale_temporaries(directory, run)
    header = dict(header, format=CHECKPOINT_FORMAT, version=__version__, step=int(step), run=run)
    path = checkpoint_path(directory, step, run)
    _write_npz_atomically(path, _temporary_prefix(run), header, arrays)
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)   # the rename itself reaches the disk
    finally:
        os.close(dfd)
    for _, old in list_checkpoints(directory, run)[:-keep] if keep > 0 else []:
        os.unlink(old)
    return path


def load_checkpoint(directory, run=None):
    """(arrays, header) of the newest checkpoint in directory: run `run`'s when it has any there, else the
    newest of any run (whose header then says how it differs); a clear MpinnError when there is none, or
    when it is unreadable, truncated, foreign or holds pickled objects."""
    if not os.path.isdir(directory):
        raise MpinnError("checkpoint directory %s does not exist" % directory)
    found = (run and list_checkpoints(directory, run)) or list_checkpoints(directory)
    if not found:
        raise MpinnError("no checkpoint (ckpt-*.npz) in %s" % directory)
    path = found[-1][1]
    try:
        with np.load(path, allow_pickle=False) as z:
            header = json.loads(str(z["header"][()]))
            arrays = {k: z[k] for k in z.files if k != "header"}
    except ValueError as e:
        raise MpinnError("%s: refused (it holds pickled objects or is not a checkpoint: %s)" % (path, e))
    except Exception as e:  # truncated zip, missing member, bad JSON, I/O error
        raise MpinnError("%s is not a readable mpinn checkpoint (%s: %s); delete it to resume from "
                         "the one before" % (path, type(e).__name__, e))
    if header.get("format") != CHECKPOINT_FORMAT:
        raise MpinnError("%s: unknown checkpoint format %r" % (path, header.get("format")))
    if "params" not in arrays:
        raise MpinnError("%s: no parameters in the checkpoint" % path)
    header["path"] = path
    return arrays, header


# ---------------------------------------------------------------- a run stopped by a signal
# STOPPED in a checkpoint directory: the last run there was stopped by a signal after writing a checkpoint
# (its one line inside). A batch script reads it to requeue the job, whatever exit code the launcher
# reports (srun --kill-on-bad-exit may kill the rank that exits last, and then reports 143); a resume
# removes it.
STOPPED = "STOPPED"


def mark_stopped(directory, line):
    path = os.path.join(directory, STOPPED)
    with open(path + ".tmp", "w") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)


def clear_stopped(directory):
    try:
        os.unlink(os.path.join(directory, STOPPED))
    except FileNotFoundError:
        pass
