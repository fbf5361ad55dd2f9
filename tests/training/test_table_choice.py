"""--table auto: what it picks and why (mpinn.settings.resolve.choose_table; one process, a stand-in comm).
The combinations a sharded table refuses are rules of the rule table (tests/entry/test_rules.py)."""
from mpinn.settings import fixed
from mpinn.settings.resolve import choose_table


class Comm:
    """What choose_table asks of a communicator."""

    def __init__(self, size=4, nodes=1, per_node=4, free=64 << 30):
        self.size, self._shape, self._free = size, (nodes, per_node), free

    def node_shape(self):
        return self._shape

    def allreduce_min_obj(self, value):
        return self._free


WIDE = 1 << 22          # hashed inputs: with 64 hidden units in float32, a 1 GiB table
INFO = {"n_out": 1}


def cfg(**kw):
    return fixed(64, dtype="float32", hidden=(64,), optimizer=kw.pop("optimizer", "sgd"), table="auto", **kw)


def test_auto_shards_across_nodes_and_when_replicas_do_not_fit():
    assert choose_table(cfg(), Comm(nodes=2, per_node=2), WIDE, INFO)[0] == "sharded"
    assert choose_table(cfg(), Comm(), WIDE, INFO)[0] == "replicated"        # one node, 4 GiB of 64
    table, why = choose_table(cfg(optimizer="adam"), Comm(free=10 << 30), WIDE, INFO)   # 4 x 3 GiB > 5 GiB
    assert table == "sharded" and "would take over half" in why
    assert choose_table(cfg(), Comm(free=10 << 30), WIDE, INFO)[0] == "replicated"     # sgd: 4 x 1 GiB
    assert choose_table(cfg(), Comm(size=1, nodes=1, per_node=1), WIDE, INFO)[0] == "replicated"
    assert choose_table(cfg(), Comm(nodes=2), 0, INFO)[0] == "replicated"
    assert choose_table(cfg(parallel="tower"), Comm(nodes=2), WIDE, INFO) == ("replicated", "auto, with --parallel tower")
    assert choose_table(cfg(comm="shm"), Comm(nodes=2), WIDE, INFO) == ("replicated", "auto, with --comm shm")
    assert choose_table(fixed(64, table="sharded"), Comm(), WIDE, INFO) == ("sharded", "asked for")
