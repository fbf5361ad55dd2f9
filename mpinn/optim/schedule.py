"""The learning rate over the steps: scaling with the global batch and warm-up."""
from mpinn.config import MpinnError


def lr_schedule(lr, global_batch, base_batch=None, scaling="none", warmup_steps=0):
    """(global step -> learning rate, the target rate). `lr` is tuned for a global batch of
    `base_batch`; linear scaling multiplies it by global_batch / base_batch (Goyal et al. 2017:
    k small steps ~ one k-times larger step while the gradient changes little over k steps), sqrt
    by the square root of that. Warm-up ramps linearly over `warmup_steps` steps from `lr` (from
    lr / warmup_steps when there is no scaling) up to the target, as Goyal et al. do."""
    if scaling not in ("none", "linear", "sqrt"):
        raise MpinnError("--lr-scaling must be none, linear or sqrt, not %r" % scaling)
    if scaling != "none" and not base_batch:
        raise MpinnError("--lr-scaling %s needs the batch the learning rate was tuned for: give "
                         "--lr-base-batch, or --batch-per-rank (then it is that batch)" % scaling)
    ratio = global_batch / base_batch if base_batch else 1.0
    target = lr * {"none": 1.0, "linear": ratio, "sqrt": ratio ** 0.5}[scaling]
    start = lr if scaling != "none" else target / max(warmup_steps, 1)
    warmup_steps = int(warmup_steps)

    def lr_at(step):
        if step >= warmup_steps:
            return target
        return start + (target - start) * step / warmup_steps

    return lr_at, target
