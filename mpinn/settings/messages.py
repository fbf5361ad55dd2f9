"""The messages that tell a user which option to reach for after an outcome (a stop with nothing saved, a diverged
run) or what a file turned out to need (predict's --data, prepare's --label): kept here, beside the option
table, so that option names live in one package."""


def stopped_saved(signal, where, checkpoint, directory):
    return "stopped by %s at %s: checkpoint %s written; continue with --resume %s" % (
        signal, where, checkpoint, directory)


def stopped_unsaved(signal, where):
    return "stopped by %s at %s; no --checkpoint-dir, so nothing was saved (give one to resume after a stop)" % (
        signal, where)


def out_of_memory(what, limits):
    """A rank ran out of memory: what it was allocating (numpy's words name the size), the limits in force."""
    return "out of memory (%s): %s; give a smaller --hash-bits, --hidden or --batch-size, or more memory" % (
        what, "; ".join(limits) or "no limit found")


def diverged(streak, step, epoch, checkpoint):
    return ("training stopped: %d consecutive steps had a non-finite loss or gradient (last at step %d, epoch %d); "
            "%s; try a lower --lr or check the data for huge or missing values" % (
                streak, step, epoch, "the last good checkpoint is %s" % checkpoint if checkpoint
                else "no checkpoint was written"))


def predict_needs_data(why):
    return "--data is required (%s)" % why


def predict_id_needs_out():
    return "--id names the first column of the predictions file: give --out FILE too"


def predict_cannot_stream(why):
    return "--stream on: %s" % why


def needs_label(fmt):
    return "--label COLUMN is required (a %s file's label is one of its columns)" % fmt.upper()


def checkpoint_not_written(step, directory, why, last):
    return "the checkpoint of step %d could not be written to %s (%s): %s" % (
        step, directory, why, "the earlier checkpoints are intact; free some space and continue from the newest, "
        "%s, with --resume %s" % (last, directory) if last else "no checkpoint of this run was written")


def model_not_written(path, why, existed, fallback, checkpoint):
    """The model file could not be written at the end of a run: where the trained parameters are."""
    kept = "; the file there is as it was" if existed else ""
    if fallback:
        where = "the trained model was written to %s instead" % fallback
    elif checkpoint:
        where = "nor to a fallback file; the last checkpoint, %s, holds the trained parameters" % checkpoint
    else:
        where = "nor to a fallback file: the trained parameters are lost (--checkpoint-dir keeps them)"
    return "the model could not be written to %s (%s)%s; %s" % (path, why, kept, where)


def prepare_parts_need_files(ranks):
    """prepare under mpirun with no --data: the embedded click log is one process's to prepare."""
    return ("prepare at %d ranks packs the files of --data, each rank its share: the embedded click log is prepared "
            "by one process" % ranks)


def prepare_packed_already(path):
    """prepare --data X.mpinn --out Y: a packed file is checked, not packed again."""
    return "%s is packed already: prepare --verify --data %s (without --out) checks it" % (path, path)


def prepare_needs_out():
    """prepare without --out: only a check of a packed file writes nothing."""
    return ("prepare needs --out (the packed file to write), or --verify and one packed file to check: --verify "
            "--data X.mpinn")


def ensemble_member_differs(k):
    return ("--ensemble: member %d read the data differently from member 1 (its columns, numeric transform or "
            "hashing); the members of an ensemble share one" % k)
