"""The learning rate over the steps: scaling with the global batch, warm-up, and decay over the run."""
import math
from dataclasses import dataclass


SCALINGS = ("none", "linear", "sqrt")
DECAYS = ("none", "cosine", "step", "plateau")
# plateau: x0.1 after every PLATEAU_PATIENCE epochs in a row no better on the held-out rows, twice at most. Not after
# one: a held-out metric also gets worse by noise, on a rare class most (satimage's damp grey soil, 9% of its rows:
# cut after each epoch no better, test AUC 0.9379, never cut 0.9466, after two 0.9450; Fashion-MNIST 0.8969, 0.8843,
# 0.8983; python -m scripts.bench.plateau_rule). Not after three either: under the default --early-stop 3 the
# third such epoch ends the run, so the rate would never fall.
PLATEAU_FACTOR, PLATEAU_CUTS, PLATEAU_PATIENCE = 0.1, 2, 2


@dataclass(frozen=True)
class Schedule:
    """global step (0-based: the number of steps done) -> that step's learning rate. Called by the
    trainer before every step and passed into the optimizer's step (Optimizer.step_(..., lr=)).

    `lr` is tuned for a global batch of `base_batch`; linear scaling multiplies it by global_batch /
    base_batch (Goyal et al. 2017: k small steps ~ one k-times larger step while the gradient changes
    little over k steps), sqrt by the square root of that: the target rate. Warm-up ramps linearly over
    `warmup_steps` steps from `lr` (from target / warmup_steps when there is no scaling) up to the
    target, as Goyal et al. do. After warm-up, the decay multiplies the target by a factor of the share
    s of the remaining steps done: cosine 0.5 (1 + cos(pi s)), from 1 down to 0 at the end of the run
    (Loshchilov and Hutter 2017, one cycle); step 1, then 0.1 from half-way and 0.01 from three
    quarters (Goyal et al.'s schedule, in steps); plateau 0.1 ** k, k the cuts so far (at most 2): one after
    every PLATEAU_PATIENCE epochs in a row whose held-out metric was no better than the best (the trainer asks
    `cuts` at each epoch's end and passes k: as Keras's ReduceLROnPlateau with patience 2); none 1."""
    lr: float                   # the rate as given
    target: float               # after scaling with the global batch
    start: float                # the rate at step 0 of a warm-up
    warmup_steps: int = 0
    decay: str = "none"
    total_steps: int = 0        # the run's steps (the decay's span ends there)

    def cuts(self, bad_epochs, plateaus=0):
        """Does the rate fall after an epoch end that makes bad_epochs epochs in a row no better than the best,
        with plateaus cuts made before it?"""
        return (self.decay == "plateau" and bad_epochs > 0 and bad_epochs % PLATEAU_PATIENCE == 0
                and plateaus < PLATEAU_CUTS)

    @property
    def constant(self):
        return not self.warmup_steps and self.decay == "none"

    def __call__(self, step, plateaus=0):
        w = self.warmup_steps
        if step < w:
            return self.start + (self.target - self.start) * step / w
        if self.decay == "none":
            return self.target
        if self.decay == "plateau":
            return self.target * PLATEAU_FACTOR ** min(plateaus, PLATEAU_CUTS)
        s = min((step - w) / max(self.total_steps - w, 1), 1.0)
        if self.decay == "cosine":
            return self.target * 0.5 * (1.0 + math.cos(math.pi * s))
        return self.target * (0.1 if s >= 0.5 else 1.0) * (0.1 if s >= 0.75 else 1.0)


def make_schedule(lr, global_batch=1, base_batch=None, scaling="none", warmup_steps=0, decay="none",
                  total_steps=0):
    """The Schedule of a run (see Schedule). The options' choices and the rule table (scaling-base) keep
    bad values off the command line: here they are API misuse (ValueError)."""
    if scaling not in SCALINGS:
        raise ValueError("scaling must be one of %s, not %r" % ("|".join(SCALINGS), scaling))
    if decay not in DECAYS:
        raise ValueError("decay must be one of %s, not %r" % ("|".join(DECAYS), decay))
    if scaling != "none" and not base_batch:
        raise ValueError("scaling %s needs base_batch, the global batch the rate was tuned for" % scaling)
    ratio = global_batch / base_batch if base_batch else 1.0
    target = lr * {"none": 1.0, "linear": ratio, "sqrt": ratio ** 0.5}[scaling]
    warmup_steps = int(warmup_steps)
    start = lr if scaling != "none" else target / max(warmup_steps, 1)
    return Schedule(float(lr), float(target), float(start), warmup_steps, decay, int(total_steps))
