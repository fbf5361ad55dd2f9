"""Training curves: one line per epoch to CSV or JSON lines, TensorBoard scalars (--log-dir), and a PNG plot at the end
(matplotlib)."""
import json
import os

from mpinn.files.events import EventWriter
from mpinn.files.outputs import made_dir, made_parent

METRICS = ("accuracy", "logloss", "auc", "rmse")


def plotting_missing():
    """Why no plot can be drawn here (matplotlib does not import), or None."""
    try:
        import matplotlib  # noqa: F401  (optional: the [plot] extra)
    except ImportError as e:
        return "matplotlib does not import (%s): pip install 'mpinn[plot]' (or pip install matplotlib)" % e
    return None


COLUMNS = ("epoch", "at", "step", "samples", "elapsed", "eval_seconds", "time", "train_loss", "seconds",
           "skipped_steps")


def flatten(record):
    """One record (an epoch's end, or a --eval-every point inside one) as flat columns: COLUMNS, valid_*."""
    row = {k: record[k] for k in COLUMNS if k in record}
    for k in METRICS + ("n", "nonfinite"):
        if k in record.get("valid", {}):
            row["valid_" + k] = record["valid"][k]
    return row


def cell(key, v):
    """One CSV cell: floats to 6 digits, the Unix time to the millisecond."""
    return ("%.3f" if key == "time" else "%.6g") % v if isinstance(v, float) else str(v)


def scalars(row, since, prefix=""):
    """The TensorBoard scalars of a curve row: the training loss, the held-out metrics, and the rows trained per second
    of training (evaluations left out) since `since`, the row before it (or where training started); their tags
    after `prefix` (an ensemble's first model: first_model/)."""
    out = {"train/loss": row.get("train_loss")}
    out.update({"valid/" + k: row["valid_" + k] for k in METRICS if "valid_" + k in row})
    seconds = (row["elapsed"] - since["elapsed"]) - (row["eval_seconds"] - since["eval_seconds"])
    if seconds > 0:
        out["train/samples_per_s"] = (row["samples"] - since["samples"]) / seconds
    return {prefix + k: v for k, v in out.items()}


def time_split(summary):
    """The end-of-run scalars: samples/s over the run and the share of each phase of a step (mean over ranks)."""
    phases = summary["phase_s_mean"]
    busy = sum(phases.values()) or 1.0
    out = {"run/samples_per_s": summary["samples_per_s"]}
    names = {"data": "data_wait", "comm": "communication"}
    out.update({"time/" + names.get(k, k): v / busy for k, v in phases.items()})
    return out


class Curve:
    """Rank 0 appends each epoch as it ends (so a crashed run keeps its curve so far; a resumed run writes the
    earlier epochs first): to the curve file, and as TensorBoard scalars at the global step to an event file in
    log_dir. ensemble: the run trains that many models (--ensemble) and the points are the first model's (the
    curve's column `model` says "first", the scalars' tags begin first_model/), the averaged model's held-out
    metrics added at the end (add_ensemble)."""

    def __init__(self, path=None, plot=None, log_dir=None, ensemble=1):
        # the curve file is replaced at the first row, not before: a run refused at its start leaves it as it was
        self.path, self.plot, self.rows = path, plot, []
        self.events = None
        if log_dir:
            self.events = EventWriter(made_dir(log_dir))     # one line where it cannot be made
        self.since = None
        self.prefix, self.model = ("first_model/", "first") if ensemble > 1 else ("", None)

    def begin(self, samples, elapsed, eval_seconds, earlier=(), step=0):
        """Where training starts (a resumed run: where its checkpoint stood, global step `step`), for the first
        samples/s; earlier: a resumed run's epochs before it (the checkpoint's history), written to the curve file
        again. A resumed run's TensorBoard events go to a file of their own, marked as a restart after `step`: the
        earlier run's file keeps what came before, and what it has past the checkpoint is dropped."""
        self.since = {"samples": samples, "elapsed": elapsed, "eval_seconds": eval_seconds}
        for record in earlier:
            self._write(self._row(record))
        if step and self.events is not None:
            self.events.restart(step + 1)

    def _row(self, record):
        row = flatten(record)
        return dict(model=self.model, **row) if self.model else row

    def add(self, record):
        row = self._row(record)
        if self.events is not None:
            self.events.scalars(row["step"], scalars(row, self.since or row, self.prefix), wall_time=row["time"])
            self.since = row
        self._write(row)

    def add_ensemble(self, metrics, step):
        """The averaged model's (the one written) held-out metrics, after the last point: a curve row (model
        "averaged", at "end") and the scalars ensemble/valid/METRIC at global step `step`."""
        valid = {"valid_" + k: metrics[k] for k in METRICS + ("n",) if k in metrics}
        if self.events is not None:
            self.events.scalars(step, {"ensemble/valid/" + k[len("valid_"):]: v for k, v in valid.items()
                                       if k != "valid_n"})
        self._write(dict(model="averaged", at="end", step=step, **valid))

    def _write(self, row):
        self.rows.append(row)
        if not self.path:
            return
        with open(self.path, "a") if len(self.rows) > 1 else open(made_parent(self.path), "w") as f:
            if self.path.endswith(".csv"):
                if len(self.rows) == 1:
                    f.write(",".join(row) + "\n")
                f.write(",".join(cell(k, row.get(k, "")) for k in self.rows[0]) + "\n")
            else:
                f.write(json.dumps(row) + "\n")

    def finish(self, say=print, summary=None):
        if self.path:
            say("curve written to %s" % self.path)
        if self.events is not None:
            if summary is not None:
                self.events.scalars(summary["global_steps"], time_split(summary))
            self.events.close()
            say("TensorBoard events written to %s" % self.events.path)
        if self.plot and self.rows:
            plot_curve(self.rows, self.plot)
            say("plot written to %s" % self.plot)


def plot_curve(rows, path):
    import matplotlib  # optional: the [plot] extra
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # optional: after use("Agg")
    # epoch ends (the --eval-every points and an ensemble's average are in the curve file, not drawn)
    rows = [r for r in rows if r.get("at", "epoch") == "epoch"]
    epochs = [r["epoch"] for r in rows]
    metrics = [k for k in METRICS if "valid_" + k in rows[-1]]
    fig, axes = plt.subplots(1, 1 + bool(metrics), figsize=(10 if metrics else 5, 3.6))
    axes = list(axes) if metrics else [axes]
    axes[0].plot(epochs, [r["train_loss"] for r in rows], "o-", label="train loss")
    if "valid_logloss" in rows[-1]:
        axes[0].plot(epochs, [r.get("valid_logloss") for r in rows], "s--", label="held-out log-loss")
    axes[0].set_xlabel("epoch")
    axes[0].set_title("loss")
    axes[0].legend()
    if metrics:
        for k in metrics:
            if k != "logloss":
                axes[1].plot(epochs, [r.get("valid_" + k) for r in rows], "o-", label=k)
        axes[1].set_xlabel("epoch")
        axes[1].set_title("held-out metrics")
        axes[1].legend()
    from matplotlib.ticker import MaxNLocator  # optional: the [plot] extra
    for ax in axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    tmp = made_parent(path) + ".tmp.png"
    # what was drawn, in the PNG's Description (tEXt) chunk: a reader checks the file without pixels
    drawn = [line.get_label() + ": %d points" % len(line.get_xdata()) for ax in axes for line in ax.get_lines()]
    fig.savefig(tmp, dpi=100, format="png", metadata={"Description": "; ".join(drawn)})
    plt.close(fig)
    os.replace(tmp, path)
