"""Learning-rate decay over the whole run, composed with the scaling and warm-up of optim.lr_schedule."""
import math

from mpinn.config import MpinnError

DECAYS = ("cosine", "step", "none")


def with_decay(lr_at, kind, total_steps, warmup_steps=0):
    """global step -> learning rate: lr_at's (scaled, warmed-up) rate, then, once warm-up is over,
    multiplied by the decay at the share t of the remaining steps done: cosine 0.5 (1 + cos(pi t)),
    from 1 down to 0 at the last step; step 1, then 0.1 from half-way and 0.01 from three quarters
    (the schedule of Goyal et al., in steps); none 1. Returns lr_at unchanged for none."""
    if kind not in DECAYS:
        raise MpinnError("--lr-decay must be one of %s, not %r" % ("|".join(DECAYS), kind))
    if kind == "none":
        return lr_at
    warmup_steps, span = int(warmup_steps), max(int(total_steps) - int(warmup_steps), 1)

    def at(step):
        rate = lr_at(step)
        if step < warmup_steps:
            return rate
        t = min((step - warmup_steps) / span, 1.0)
        if kind == "cosine":
            return rate * 0.5 * (1.0 + math.cos(math.pi * t))
        return rate * (0.1 if t >= 0.5 else 1.0) * (0.1 if t >= 0.75 else 1.0)
    return at
