"""TablePass: a table read chunk by chunk under a DataSpec and a HashSpec, as training reads it and prepare packs it."""
import numpy as np

from mpinn.core.errors import MpinnError
from mpinn.data.fit.labels import LabelScan, encode_labels
from mpinn.data.fit.stats import ColumnStats
from mpinn.hashing import encode_indices


class TablePass:
    """What reading a table source (data.tables.TableSource, data.clicktext.ClickTextSource) decides and
    gathers, for load_table (every chunk in memory) and prepare (each chunk written to a packed file as it
    comes): the hashing contract, the task and classes, the numeric columns' statistics.

    What hashing a chunk and encoding its labels needs is known up front when the specs give it (a
    contract, trick mode's bits; the classes, or a regression). Otherwise learn() sees every chunk first
    and settle() decides: the contract fitted to the values (ContractFitter), the task and classes from
    the labels (LabelScan; with every label in memory at once, labels() lets encode_labels decide them).
    The statistics are folded in by learn(), or by chunk() when nothing was learnt first: one pass over
    the numbers either way, with the same bits however the rows were chunked (ColumnStats)."""

    def __init__(self, source, spec, hashing, threads=1, count_values=False):
        """count_values: fit the contract even when it is known up front (its cardinalities and the
        collision report need every value)."""
        self.source, self.threads, self.positive = source, threads, spec.positive
        self.task, self.classes, self.unlabelled = spec.task, spec.classes, spec.missing_labels == "keep"
        features = source.categorical
        self.contract, self.fitter = hashing.contract, None
        if self.contract is not None and self.contract.get("features") != features:
            raise MpinnError("the hashing contract is for categorical columns %s, the data names %s"
                             % (self.contract.get("features"), features))
        if self.contract is None and features:
            self.contract = None if count_values else hashing.fixed(features)
            if self.contract is None:
                self.fitter = hashing.fitter(features)
        self.stats = ColumnStats(source.numeric) if source.numeric else None
        self.learnt = False
        self._scan = None

    @property
    def labels_known(self):
        """Are the task and classes known (no label column, a regression, or classes given)?"""
        return not self.source.has_label or self.task == "regression" or self.classes is not None

    @property
    def needs_scan(self):
        """Must every chunk be seen before the first is hashed and its labels encoded?"""
        return (self.fitter is not None and self.contract is None) or not self.labels_known

    def learn(self, part, labels=True):
        """A chunk seen before any is hashed: its values (for the contract), its labels (labels=False: they
        are decided in labels(), from all of them at once) and its numbers (the statistics)."""
        if self.fitter is not None:
            self.fitter.update(part.cats, self.threads)
        if labels and not self.labels_known:
            if self._scan is None:
                self._scan = LabelScan(self.task, self.positive)
            self._scan.update(part.labels)
        if self.stats is not None:
            self.stats.update(part.Xd)
        self.learnt = True

    def settle(self):
        """After learn(): the contract and the task and classes the chunks decide."""
        if self._scan is not None:
            self.task, self.classes = self._scan.result()
            self._scan = None
        if self.fitter is not None and self.contract is None:
            self.contract = self.fitter.contract()
        return self

    def hash(self, part):
        """A chunk's input columns under the contract (encode_indices), None without categorical columns."""
        return encode_indices(part.cats, self.contract, self.threads) if self.contract is not None else None

    def labels(self, raw, n):
        """y of `n` rows' labels `raw` under the task and classes (zeros without a label column). Not yet
        known (every label at once, in memory): encode_labels decides them here, from these labels."""
        if not self.source.has_label:
            return np.zeros(n)
        if self.labels_known:
            return encode_labels(raw, self.task, self.classes, unlabelled=self.unlabelled)[0]
        y, self.task, self.classes = encode_labels(raw, self.task, self.classes, self.positive)
        return y

    def chunk(self, part):
        """(indices, y) of a chunk, once what they need is known; its numbers go into the statistics
        unless learn() took them."""
        if self.stats is not None and not self.learnt:
            self.stats.update(part.Xd)
        return self.hash(part), self.labels(part.labels, part.n)

    def numeric_stats(self):
        return self.stats.result() if self.stats is not None else None
