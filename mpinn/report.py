"""Training curves: one line per epoch to CSV or JSON lines, and a PNG plot at the end (matplotlib)."""
import json
import os


METRICS = ("accuracy", "logloss", "auc", "rmse")


def plotting_missing():
    """Why no plot can be drawn here (matplotlib does not import), or None."""
    try:
        import matplotlib  # noqa: F401
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


class Curve:
    """Rank 0 appends each epoch as it ends (so a crashed run keeps its curve so far)."""

    def __init__(self, path=None, plot=None):
        self.path, self.plot, self.rows = path, plot, []
        if path:
            open(path, "w").close()

    def add(self, record):
        row = flatten(record)
        self.rows.append(row)
        if not self.path:
            return
        with open(self.path, "a") as f:
            if self.path.endswith(".csv"):
                if len(self.rows) == 1:
                    f.write(",".join(row) + "\n")
                f.write(",".join(cell(k, row.get(k, "")) for k in self.rows[0]) + "\n")
            else:
                f.write(json.dumps(row) + "\n")

    def finish(self, say=print):
        if self.path:
            say("curve written to %s" % self.path)
        if self.plot and self.rows:
            plot_curve(self.rows, self.plot)
            say("plot written to %s" % self.plot)


def plot_curve(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = [r for r in rows if r.get("at") != "step"]      # epoch ends (the --eval-every points are in the curve)
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
    from matplotlib.ticker import MaxNLocator
    for ax in axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    tmp = path + ".tmp.png"
    # what was drawn, in the PNG's Description (tEXt) chunk: a reader checks the file without pixels
    drawn = [line.get_label() + ": %d points" % len(line.get_xdata()) for ax in axes for line in ax.get_lines()]
    fig.savefig(tmp, dpi=100, format="png", metadata={"Description": "; ".join(drawn)})
    plt.close(fig)
    os.replace(tmp, path)
