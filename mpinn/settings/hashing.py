"""The hashing options' HashSpec for an entry point with its own parser (prepare), once their rules pass."""
from mpinn.hashing import HashSpec
from mpinn.settings.rules import RULES, check
from mpinn.settings.table import RunConfig

# the rules on the hashing options alone (mpinn.settings.rules)
RULE_NAMES = ("buckets-split", "buckets-block", "buckets-columns")
NAMES = ("data", "categorical", "hash_mode", "hash_bits", "hash_seed", "hash_k", "buckets")


def hash_spec(opts, contract=None):
    """The HashSpec of the hashing options of prepare's arguments (training's names, parsed with training's
    types: data, categorical, hash_mode, hash_bits, hash_seed, hash_k, buckets), once the rule table's
    hashing rules pass them: the same one line as training's. A given contract (a --like file's) is used
    as it is, and the options are not read."""
    if contract is not None:
        return HashSpec(contract=contract)
    cfg = RunConfig(**{n: getattr(opts, n) for n in NAMES})
    check(cfg, [r for r in RULES if r.name in RULE_NAMES])
    return cfg.hashing
