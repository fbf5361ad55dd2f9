"""--table: what auto picks and why, and the combinations sharding refuses (one process, a stand-in comm)."""
import pytest

from mpinn.config import ModelSpec, MpinnError
from mpinn.training.sharded import choose_table


class Comm:
    """What choose_table asks of a communicator."""

    def __init__(self, size=4, nodes=1, per_node=4, free=64 << 30, device=None):
        self.size, self._shape, self._free = size, (nodes, per_node), free
        self.backend = type("B", (), {"device": device})()

    def node_shape(self):
        return self._shape

    def allreduce_min_obj(self, value):
        return self._free


WIDE = ModelSpec(1 << 22, 4, (64,), 1, "relu", "sigmoid", "float32", sparse_fan_in=20)     # a 1 GiB table
DENSE = ModelSpec(0, 10, (8,), 2, "relu", "softmax", "float32")


def test_auto_shards_across_nodes_and_when_replicas_do_not_fit():
    assert choose_table("auto", Comm(nodes=2, per_node=2), WIDE)[0] == "sharded"
    assert choose_table("auto", Comm(), WIDE)[0] == "replicated"        # one node, 4 GiB of 64
    table, why = choose_table("auto", Comm(free=6 << 30), WIDE, state_arrays=2)   # 4 x 3 GiB > 3 GiB
    assert table == "sharded" and "would take over half" in why
    assert choose_table("auto", Comm(size=1, nodes=1, per_node=1), WIDE)[0] == "replicated"
    assert choose_table("auto", Comm(nodes=2), DENSE)[0] == "replicated"
    assert choose_table("auto", Comm(nodes=2), WIDE, towers="shard") == ("replicated", "auto, with --parallel tower")
    assert choose_table("auto", Comm(nodes=2), WIDE, transport="shm") == ("replicated", "auto, with --comm shm")


@pytest.mark.parametrize("kw,flag", [(dict(towers="shard"), "--parallel tower"), (dict(reduce="gather"), "--reduce gather"),
                                     (dict(compress="fp16"), "--compress"), (dict(overlap=True), "--overlap"),
                                     (dict(average_every=4), "--average-every"), (dict(transport="shm"), "--comm shm")])
def test_sharded_refuses_what_it_cannot_do(kw, flag):
    with pytest.raises(MpinnError, match="--table sharded does not combine with %s" % flag) as e:
        choose_table("sharded", Comm(), WIDE, **kw)
    assert e.value.collective
    with pytest.raises(MpinnError, match="no hashed inputs"):
        choose_table("sharded", Comm(), DENSE)
    with pytest.raises(MpinnError, match="--device gpu"):
        choose_table("sharded", Comm(device="gpu"), WIDE)
    assert choose_table("sharded", Comm(), WIDE) == ("sharded", "asked for")
