"""HashSpec: how a reader hashes categorical columns (the options a contract is made with, or the contract)."""
from dataclasses import dataclass
from typing import Any, Optional

from mpinn.hashing.contract import MAX_BITS, MAX_K, MODES, ContractFitter, make_contract


@dataclass(frozen=True)
class HashSpec:
    """What the readers hash categorical columns with. A given `contract` (a model's, or a training file's
    for its held-out file) is used as it is; otherwise one is made from the other fields, fitted to the
    rows where it needs them (split's bucket counts, onehot's vocabularies, auto bits). The option rules
    (mpinn.settings) check what the command line gives before any data is read; a bad value here is
    API misuse: ValueError."""
    mode: str = "trick"                 # trick | split | onehot
    bits: Optional[int] = 18            # trick: 2**bits columns; None: auto, from the distinct values
    seed: int = 0                       # xxh64 seed
    k: int = 4                          # split: columns per value
    buckets: Any = None                 # split: buckets per block, an int for every feature or {feature: n};
    #                                     None: ceil(sqrt(distinct values)) (parse_buckets reads the option)
    contract: Optional[dict] = None     # used as it is instead of making one

    def __post_init__(self):
        if self.contract is not None:
            return                      # the contract decides everything; the rest is not read
        if self.mode not in MODES:
            raise ValueError("hash mode must be one of %s, not %r" % ("|".join(MODES), self.mode))
        if self.bits is not None and not 1 <= int(self.bits) <= MAX_BITS:
            raise ValueError("trick mode's bits must be in 1..%d, not %s" % (MAX_BITS, self.bits))
        if not 1 <= int(self.k) <= MAX_K:
            raise ValueError("split mode's k must be in 1..%d, not %s" % (MAX_K, self.k))
        if self.buckets is not None:
            if self.mode != "split":
                raise ValueError("bucket counts are for split mode, not %s" % self.mode)
            if not isinstance(self.buckets, (int, dict)):
                raise ValueError("buckets: an int or {feature: int}, not %r" % (self.buckets,))

    def using(self, contract):
        """This spec with a fixed contract (None: this spec as it is)."""
        return self if contract is None else HashSpec(contract=contract)

    def fixed(self, features):
        """The contract known before any row is read (the given one, or trick mode's with its bits), or
        None when it is fitted to the rows."""
        if self.contract is not None:
            return self.contract
        if self.mode == "trick" and self.bits is not None:
            return make_contract(features, self.bits, self.seed)
        return None

    def fitter(self, features):
        """A ContractFitter that learns this spec's contract for `features` from rows seen chunk by chunk."""
        return ContractFitter(features, self.mode, self.k, self.bits, self.seed, self.buckets)
