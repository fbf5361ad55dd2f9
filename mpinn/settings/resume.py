"""What a run's options ask of the files around it, before anything is read: its outputs can be written, a fresh
run's --checkpoint-dir holds no earlier run, --resume names a run to continue; and whether a checkpoint continues
this configuration (the options it was written with, against this run's)."""
import hashlib
import json
import os

from mpinn.core.errors import MpinnError
from mpinn.data.files import named
from mpinn.data.fit.transform import check_same
from mpinn.files.checkpoint import list_checkpoints, member_dirs, remove_stale_temporaries
from mpinn.files.outputs import Claims, check_apart, check_dir, check_file
from mpinn.hashing import check_contract
from mpinn.settings.table import OPTIONS


def check_outputs(cfg):
    """Every output of a training run can be written, over none of its inputs, and --valid is apart from --data
    (rank 0, before any data is read)."""
    for name in ("model_out", "metrics_out", "curve", "plot", "timeline"):
        if getattr(cfg, name):
            check_file(getattr(cfg, name), "--" + name.replace("_", "-"))
    for name in ("checkpoint_dir", "resume", "log_dir"):
        if getattr(cfg, name):
            check_dir(getattr(cfg, name), "--" + name.replace("_", "-"))
    written = [("--" + name.replace("_", "-"), getattr(cfg, name), name.endswith("dir"))
               for name in ("model_out", "metrics_out", "curve", "plot", "timeline", "checkpoint_dir", "log_dir")]
    read = named([("--data", cfg.data), ("--valid", cfg.valid), ("--config", cfg.config)])
    check_apart(written, read)
    check_valid_apart(read)
    if cfg.resume:
        if not os.path.isdir(cfg.resume):
            raise MpinnError("--resume: checkpoint directory %s does not exist" % cfg.resume)
        if not list_checkpoints(cfg.resume):
            raise MpinnError("--resume: no checkpoint (ckpt-*.npz) in %s" % cfg.resume)


def check_valid_apart(read):
    """No --valid file is one that --data reads too (read: mpinn.data.files.named's (option, path) pairs, files
    compared by device and inode): its held-out metric (and the early stop and the model kept by it) would be
    measured on rows the model trains on."""
    def files(option):
        return [(p, os.stat(p)) for what, p in read if what == option and os.path.isfile(p)]
    trained = {(st.st_dev, st.st_ino): p for p, st in files("--data")}
    for held, st in files("--valid"):
        if (st.st_dev, st.st_ino) in trained:
            raise MpinnError("--valid %s is also read as --data (%s): the held-out metric would be measured on "
                             "rows trained on; give rows kept apart, or leave --valid out to hold out --holdout "
                             "of the data" % (held, trained[(st.st_dev, st.st_ino)]))


def own_checkpoint_dir(cfg):
    """A fresh run (no --resume) starts in a --checkpoint-dir that holds no checkpoint, or with
    --overwrite-checkpoints, which removes them now: another run's files are never mistaken for this one's."""
    if not cfg.checkpoint_dir or cfg.resume:
        return
    places = [cfg.checkpoint_dir] + member_dirs(cfg.checkpoint_dir)      # an ensemble's members' too
    found = sorted(item for place in places for item in list_checkpoints(place))
    if found and not cfg.overwrite_checkpoints:
        raise MpinnError("--checkpoint-dir %s holds %d checkpoint(s) of an earlier run (the newest %s): continue "
                         "it with --resume %s, use another directory, or give --overwrite-checkpoints to delete "
                         "them" % (cfg.checkpoint_dir, len(found), os.path.basename(found[-1][1]),
                                   cfg.checkpoint_dir), collective=True)
    for _, path in found:
        os.unlink(path)
    for place in places:
        remove_stale_temporaries(place)


def resume_config(cfg, size):
    """The options a checkpoint records and a resume must match: all but those marked resume=True in the option
    table, as JSON values; --readers as the readers it means at `size` ranks (readers_meant)."""
    values = cfg.options()
    config = json.loads(json.dumps({f.name: values[f.name] for f in OPTIONS if not f.metadata["resume"]}))
    config["readers"] = readers_meant(config["readers"], size)
    return config


def readers_meant(readers, size):
    """--readers as the readers it means at `size` ranks: which rows a stream's step trains depends on the number of
    readers, and --readers all at N ranks is --readers N (mpinn.data.stream_setup.reader_streams), but at 1 rank
    it is one reader, not --readers 1's rank 0 reading for all (another order)."""
    return str(size) if readers == "all" and size > 1 else readers


def _readers_differ(path, saved, now):
    """The line for a stream read by other readers than the checkpoint's (readers_meant's values)."""
    def who(k):
        return {"1": "rank 0 alone (--readers 1)", "all": "1 reader (--readers all at 1 rank)"}.get(
            k, "%s readers (--readers all at %s ranks, or --readers %s)" % (k, k, k))
    how = {"1": "--readers 1", "all": "--readers all on 1 rank"}.get(
        saved, "--readers all on %s ranks, or with --readers %s on %s or more ranks" % (saved, saved, saved))
    return MpinnError("--resume %s: the checkpoint's stream was read by %s, this run's by %s: which rows "
                      "each step trains depends on the readers; resume with %s" % (path, who(saved), who(now), how))


def run_identity(config, spec, meta, n_train):
    """What a checkpoint must match to continue a run, as 12 hex digits: its files carry it in their name, so that
    a directory two runs share keeps each run's checkpoints apart."""
    key = json.dumps({"config": config, "spec": spec.to_dict(), "hashing": meta.get("hashing"),
                      "transform": meta.get("transform"), "n_train": n_train}, sort_keys=True, default=str)
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def check_resume(header, config, spec, meta, n_train, batch):
    """A checkpoint continues only the run that wrote it: name the first thing that differs."""
    path = header["path"]
    saved = header.get("config", {})
    if "readers" in saved:      # written before --readers was recorded as the readers it meant: the same
        saved = dict(saved, readers=readers_meant(saved["readers"], header.get("ranks", 1)))
    for k in sorted(set(saved) | set(config)):
        if k == "readers" and k in saved and saved[k] != config.get(k):
            raise _readers_differ(path, saved.get(k), config.get(k))
        if saved.get(k) != config.get(k):
            raise MpinnError("--resume %s: the checkpoint was written with --%s %s, this run has %s"
                             % (path, k.replace("_", "-"), saved.get(k), config.get(k)))
    if header.get("spec") != spec.to_dict():
        raise MpinnError("--resume %s: the checkpoint's architecture %s does not match this run's %s"
                         % (path, header.get("spec"), spec.to_dict()))
    check_same((header.get("meta") or {}).get("transform"), meta.get("transform"), "--resume %s" % path)
    stored, wanted = (header.get("meta") or {}).get("hashing"), meta.get("hashing")
    if stored != wanted:
        if stored is None or wanted is None:
            raise MpinnError("--resume %s: the checkpoint and this run's data differ in hashing" % path)
        check_contract(stored, wanted)
    if header["position"]["batch_size"] != batch:
        raise MpinnError("--resume %s: the checkpoint's global batch is %s rows, this run's is %d (with "
                         "--batch-per-rank it changes with the number of ranks)"
                         % (path, header["position"]["batch_size"], batch))
    if header.get("n_train") != n_train:
        raise MpinnError("--resume %s: the checkpoint was trained on %s rows, this data has %d"
                         % (path, header.get("n_train"), n_train))


def check_kept(header, has_best_params, keep):
    """--keep best continues only a checkpoint that holds its best epoch's parameters (one written with --keep
    best): from any other, the model file would hold the last epoch's under the best one's name and metrics."""
    best = header["position"].get("best")
    if keep == "best" and best is not None and not has_best_params:
        raise MpinnError("--resume %s: the checkpoint was written with --keep last and holds no copy of its best "
                         "epoch (epoch %s); resume with --keep last, or start afresh to keep the best"
                         % (header["path"], best["epoch"]))


def claim_outputs(cfg):
    """Rank 0, before anything is read: the outputs checked, then claimed for this run (mpinn.files.outputs.Claims: a
    second run given the same file or checkpoint directory is refused now, not found out at the end), then a fresh
    run's checkpoint directory emptied where asked (another run's files never)."""
    check_outputs(cfg)
    files = [("--" + name.replace("_", "-"), getattr(cfg, name), False)
             for name in ("model_out", "metrics_out", "curve", "plot", "timeline")]
    claims = Claims(files + [("--checkpoint-dir" if cfg.checkpoint_dir else "--resume",
                              cfg.checkpoint_dir or cfg.resume, True)])
    try:
        own_checkpoint_dir(cfg)
    except BaseException:
        claims.release()
        raise
    return claims
