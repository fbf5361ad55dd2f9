"""The Python API in a few lines. Run it under MPI like training:

    mpirun -np 2 python -m mpi4py scripts/api_example.py

(-m mpi4py: an unhandled exception on one rank aborts every rank instead of leaving them waiting.) Only rank 0
prints, and a model file is written only where model_out names one."""
import argparse

import numpy as np

argparse.ArgumentParser(description="The Python API's example: train on the click log and on arrays, predict new "
                                    "rows, the scikit-learn estimator (run under mpirun -np N python -m mpi4py)."
                        ).parse_args()

import mpinn.api as mp  # noqa: E402

# 1. The embedded click log: a sparse hashed first layer, 2 epochs, data parallel over the ranks (no model file:
#    none is asked for; the trained network is clicks.model, its parameters clicks.params on rank 0).
clicks = mp.train(default_rows=50_000, epochs=2, hidden=(32,), quiet=True)
if clicks.rank == 0:
    print("click log: held-out AUC %.3f after %d epochs, %.0f samples/s"
          % (clicks.metrics["auc"], len(clicks.history), clicks.summary["samples_per_s"]))

# 2. Your own arrays: every rank builds the same call; rank 0's data is the one that is used.
rng = np.random.default_rng(0)
X = rng.standard_normal((4000, 6))
y = np.where(X[:, 0] * X[:, 1] > 0, "same sign", "different")
xor = mp.train(mp.arrays(X, y), hidden=(16,), activation="tanh", optimizer="adam", epochs=20,
               batch_size=100, holdout=0.2, model_out="xor.npz", quiet=True)
if xor.rank == 0:
    print("arrays: held-out accuracy %.3f, confusion %s" % (xor.metrics["accuracy"], xor.metrics["confusion"]))

    # 3. Predict in one process from the model file (tower models too), with metrics when labelled.
    X_new = rng.standard_normal((1000, 6))
    y_new = np.where(X_new[:, 0] * X_new[:, 1] > 0, "same sign", "different")
    pred, metrics = mp.predict("xor.npz", mp.arrays(X_new, y_new))
    print("new rows: accuracy %.3f" % metrics["accuracy"])

# 4. The same network as a scikit-learn estimator: fitted on every rank, the same fitted model on each.
from mpinn.sklearn import MpinnClassifier  # noqa: E402
clf = MpinnClassifier(hidden=(16,), activation="tanh", optimizer="adam", epochs=20, batch_size=100, holdout=0.2)
clf.fit(X, y)
if xor.rank == 0:
    print("estimator: accuracy on the new rows %.3f (classes %s)" % (clf.score(X_new, y_new), ", ".join(clf.classes_)))
