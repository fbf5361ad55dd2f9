"""The plan (mpinn.settings.plan.make_plan): how a run is distributed, decided once from the configuration, the
job's topology and the model, with the reason for each choice; and the rules the job refuses. One process: the
topologies are made by hand (Topology.of_nodes), as a probe of that job would report them."""
import numpy as np
import pytest

from mpinn.comm.topology import Topology
from mpinn.core.errors import MpinnError
from mpinn.core.spec import ModelSpec
from mpinn.optim import create_optimizer
from mpinn.settings import fixed, make_plan

WIDE = ModelSpec(1 << 22, 4, (64,), 1, "relu", "sigmoid", "float32")     # hashed inputs: a 1 GiB table in float32
DENSE = ModelSpec(0, 784, (256,), 10, "relu", "softmax", "float32")
GIB = 1 << 30


def job(nodes=1, per_node=4, free=64 * GIB, shm=None, sizes=None):
    """nodes of per_node ranks (or of `sizes`), `free` bytes of memory, `shm` bytes of /dev/shm on each node."""
    sizes = sizes or [per_node] * nodes
    return Topology.of_nodes([n for n, k in enumerate(sizes) for _ in range(k)], mem_available=free,
                             shm_room=tuple([shm] * len(sizes)))


def plan(topo, spec=WIDE, optimizer="sgd", batch=64, **options):
    cfg = fixed(batch, dtype=spec.dtype, hidden=spec.hidden, optimizer=optimizer, table=options.pop("table", "auto"),
                **options)
    opt = create_optimizer(optimizer, spec.n_params, np, cfg.weight_decay, (), table=(spec.n_sparse, spec.first_width),
                           hashed_update=cfg.hashed_update)
    return make_plan(cfg, topo, spec, opt)


def test_auto_shards_the_table_across_nodes_and_when_replicas_do_not_fit():
    assert plan(job(nodes=2, per_node=2)).table == "sharded"
    assert plan(job()).table == "replicated"                            # one node, 4 GiB of 64
    p = plan(job(free=10 * GIB), optimizer="adam")                      # 4 x 3 GiB > 5 GiB
    assert p.table == "sharded" and "would take over half" in p.table_why
    assert plan(job(free=10 * GIB)).table == "replicated"              # sgd: 4 x 1 GiB
    assert plan(job(per_node=1)).table_why == "one rank"
    assert plan(job(nodes=2), spec=DENSE).table_why == "no hashed inputs"
    assert plan(job(nodes=2), parallel="tower").table_why == "auto, with --parallel tower"
    assert plan(job(nodes=2), comm="shm").table_why == "auto, with --comm shm"
    p = plan(job(), table="sharded")
    assert (p.table, p.table_why, p.cfg.table) == ("sharded", "asked for", "sharded")
    assert plan(job(nodes=2)).cfg.where("table") == "data"              # the job's choice, recorded in the config


def test_gradients_travel_through_shared_memory_on_one_node_unless_it_lacks_room():
    p = plan(job())
    assert (p.transport, p.step, p.shared_params) == ("shm", "shared", True)
    assert p.transport_note.startswith("summed in shared memory (every rank on one node")
    p = plan(job(shm=1 << 20))          # a container's small /dev/shm: MPI_Allreduce, and why
    assert p.transport == "mpi" and p.step == "reduce" and "/dev/shm has 1 MiB free" in p.transport_note
    with pytest.raises(MpinnError, match="--comm shm: the gradient slots need"):
        plan(job(shm=1 << 20), comm="shm")
    assert plan(job(nodes=2, per_node=2), table="replicated").transport == "mpi"     # across nodes: MPI's own
    p = plan(job(nodes=2, per_node=2), table="replicated", comm="shm")
    assert p.transport == "shm" and "among the 2 nodes' first ranks" in p.transport_note
    assert plan(job(), comm="mpi").transport_note == "MPI_Allreduce"
    assert plan(job(), compress="fp16").transport == "mpi"
    assert plan(job(), reduce="gather").transport == "none"


def test_the_step_follows_the_options_and_the_job():
    assert plan(job(), spec=DENSE).step == "reduce"                 # a dense model's SGD: its own copy
    assert plan(job(), spec=DENSE, optimizer="adam").step == "shared"  # state held once per node
    assert plan(job(), average_every=4).step == "local-sgd"
    assert plan(job(), overlap=True).step == "overlap"
    assert plan(job(), table="sharded").step == "sharded"
    assert plan(job(sizes=[2, 1]), comm="shm", table="replicated").step == "reduce"   # a node of one rank
    assert plan(job(), parallel="tower").step == "reduce"


def test_the_hashed_block_always_travels_as_rows_where_the_optimizer_needs_them():
    assert plan(job()).sparse_threshold == 0.25
    assert plan(job(), optimizer="adam").sparse_threshold == float("inf")
    assert plan(job(), weight_decay=0.01).sparse_threshold == float("inf")


def test_the_sharded_tables_exchange_and_hot_rows():
    p = plan(job(nodes=4, per_node=2))
    assert (p.exchange, p.exchange_why) == ("node", "auto: 4 nodes of 2 ranks; gradient rows summed in the node")
    p = plan(job(nodes=4, per_node=3))
    assert p.exchange_why == "auto: 4 nodes of 3 ranks; gradient rows unsummed (3 ranks a node, not a power of two)"
    assert plan(job(nodes=2, per_node=2)).exchange_why == "auto: 2 nodes, under 4"
    assert plan(job(nodes=4, per_node=1)).exchange_why == "auto: one rank per node"
    assert plan(job(per_node=2), table="sharded", shard_exchange="node").exchange == "node"
    assert plan(job(nodes=2, per_node=1), shard_exchange="node").exchange_why.endswith("is the flat exchange")
    assert plan(job(sizes=[2, 1])).exchange_why.startswith("auto: the nodes hold different numbers of ranks")
    with pytest.raises(MpinnError, match="--shard-exchange node: the nodes hold different numbers of ranks"):
        plan(job(sizes=[2, 1]), shard_exchange="node")
    p = plan(job(nodes=2, per_node=2), hot_rows="auto")
    assert p.hot_rows == "auto" and p.needs_counts
    p = plan(job(per_node=2), table="sharded", hot_rows="auto")
    assert p.hot_rows == "off" and p.hot_why == ": one node" and not p.needs_counts
    assert plan(job(nodes=2, per_node=2), hot_rows="auto", hashed_update="dense").hot_rows == "off"
    with pytest.raises(MpinnError, match="--hot-rows 9: the table has 8 rows"):
        plan(job(nodes=2, per_node=2), spec=ModelSpec(8, 1, (4,), 1, "relu", "sigmoid"), hot_rows="9")
    assert plan(job()).exchange is None         # replicated: no exchange to plan


def test_every_reader_needs_a_share_of_the_global_batch():
    """--readers all or K: each reader takes split_counts(B, K)'s share of every global batch; a batch of fewer rows
    than readers would leave one with none (it used to take a row anyway, and the batch grew past the one asked)."""
    assert plan(job(per_node=3), DENSE, batch=3, readers="all").cfg.batch == 3
    assert plan(job(per_node=3), DENSE, batch=2, readers="2").cfg.batch == 2
    assert plan(job(per_node=3), DENSE, batch=2).cfg.batch == 2      # one reader: a rank may get no rows
    with pytest.raises(MpinnError, match="--readers all: each of the 3 readers .* give --batch-size 3 or more"):
        plan(job(per_node=3), DENSE, batch=2, readers="all")
    with pytest.raises(MpinnError, match="--readers 2: each of the 2 readers"):
        plan(job(per_node=3), DENSE, batch=1, readers="2")


def test_a_model_larger_than_the_jobs_memory_is_refused():
    """Its parameters and one gradient (WIDE: 2^22 x 64 + 385 float32 parameters, 2.0 GiB) must fit in the memory
    the job's nodes have available; before this rule such a run ended in a traceback as the model was made."""
    need = 2 * 4 * WIDE.n_params
    assert need == 2 * 4 * ((1 << 22) * 64 + 4 * 64 + 64 + 64 + 1)
    with pytest.raises(MpinnError, match=r"the model has %d parameters: they and a gradient of them take 2\.0 GiB, "
                                         r"more than the 1\.0 GiB available on the job's 1 node" % WIDE.n_params):
        plan(job(free=GIB), WIDE)
    assert plan(job(free=need), WIDE).table == "sharded"        # fits, just (the table is sharded to make room)
    assert plan(job(nodes=2, free=need // 2 + 1), WIDE).table == "sharded"    # two nodes' memory together
    from mpinn.settings.job_rules import MODEL_MEMORY      # a GPU run's model lives on its GPUs
    assert MODEL_MEMORY.broken(fixed(64, device="cpu"), job(free=GIB), WIDE)
    assert not MODEL_MEMORY.broken(fixed(64, device="gpu"), job(free=GIB), WIDE)


def test_the_start_up_lines_come_from_the_plan():
    p = plan(job())
    assert p.lines(WIDE.n_sparse) == ["gradients: summed in shared memory (every rank on one node; --comm mpi for "
                                      "MPI_Allreduce); parameters and optimizer state: one copy per node, each rank "
                                      "steps its part; table replicated (auto: one node, with room for the replicas)"]
    assert plan(job(per_node=1)).lines(WIDE.n_sparse) == []
    p = plan(job(nodes=2, per_node=2))
    assert p.lines(WIDE.n_sparse)[0].startswith("gradients: hashed table sharded by rows over 4 ranks (auto: the job "
                                                "spans 2 nodes)")
    assert p.hot_line(0, 0) == "sharded table: flat exchange (auto: 2 nodes, under 4); no hot rows (--hot-rows off)"


def test_the_device_is_the_probes_answer():
    gpus = tuple(("cupy", "gpu %d" % r, ("h", "bus%d" % r), None) for r in range(2))
    one_short = gpus[:1] + (("numpy", "cpu (numpy): --device auto found no GPU: no driver", None, None),)
    topo = Topology.of_nodes([0, 0], devices=gpus, cuda_aware=((False, "MPIX"),) * 2)
    p = plan(topo, device="gpu")
    assert p.device == "gpu" and p.transport == "staged" and "gradients by staged" in p.device_note
    p = plan(Topology.of_nodes([0, 0], devices=one_short), device="auto")
    assert p.device == "cpu" and "rank 1 found no GPU" in p.device_note
    with pytest.raises(MpinnError, match="--device gpu: no usable GPU on rank 1: no driver"):
        plan(Topology.of_nodes([0, 0], devices=gpus[:1] + ((None, "no driver", None, None),)), device="gpu")
    with pytest.raises(MpinnError, match="--comm cuda-aware: this MPI library is not CUDA-aware"):
        plan(topo, device="gpu", comm="cuda-aware")
    shared = tuple(("cupy", "gpu 0", ("h", "bus0"), None) for _ in range(2))
    with pytest.raises(MpinnError, match="ranks 0 and 1 share GPU bus0 on h"):
        plan(Topology.of_nodes([0, 0], devices=shared), device="gpu", comm="nccl")


def gpu_job(n, aware=False):
    """n ranks on one host, each with its own GPU (as the probe binds them), their MPI CUDA-aware or not."""
    return Topology.of_nodes([0] * n, devices=tuple(("cupy", "gpu %d" % r, ("h", "bus%d" % r), None) for r in range(n)),
                             cuda_aware=((aware, "MPIX_Query_cuda_support()"),) * n)


def test_one_rank_on_a_gpu_moves_nothing_through_the_host():
    """--comm auto at np 1 on a GPU: transport none (staging the gradient through the host was a copy out and back
    every step for nothing); asked for, a transport is what runs; two ranks stage or go CUDA-aware."""
    p = plan(gpu_job(1), device="gpu")
    assert (p.device, p.transport, p.lines(WIDE.n_sparse)) == ("gpu", "none", [])
    assert p.device_note == ("gpu 0; gradients stay on the GPU (one rank: nothing to exchange); step: one captured "
                             "CUDA graph a step (--graph auto)")
    assert plan(gpu_job(1, aware=True), device="auto").transport == "none"
    assert plan(gpu_job(1), device="gpu", comm="staged").transport == "staged"
    assert plan(gpu_job(2), device="gpu").transport == "staged"
    p = plan(gpu_job(2, aware=True), device="gpu")
    assert p.transport == "cuda-aware" and "gradients by cuda-aware (CUDA-aware MPI: MPIX" in p.device_note


def test_a_gpu_rank_steps_by_one_captured_graph_where_the_plan_covers_the_run():
    """--graph auto: the step plan (mpinn.training.graph_plan) at one GPU rank for sgd and adam; eager, with the
    reason on the device line, for what it does not cover; --graph on refuses that; --graph off and the CPU: eager."""
    for spec, opt in ((WIDE, "sgd"), (DENSE, "adam")):
        p = plan(gpu_job(1), spec, opt, device="gpu")
        assert (p.step, p.step_why) == ("graph", "one captured CUDA graph a step (--graph auto)")
    p = plan(gpu_job(1), optimizer="adagrad", device="gpu")
    assert p.step == "reduce" and p.device_note.endswith(
        "; step eager (--graph auto: not captured, --optimizer adagrad (the plan has sgd and adam))")
    assert plan(gpu_job(2), device="gpu").step_why == "--graph auto: not captured, 2 ranks (the exchange is not " \
                                                       "in the graph yet)"
    with pytest.raises(MpinnError, match="--graph on: a captured CUDA graph needs a GPU; this run computes on the cpu"):
        plan(job(1, 1), graph="on")
    with pytest.raises(MpinnError, match="--graph on: the step plan does not cover this run: --optimizer adagrad"):
        plan(gpu_job(1), optimizer="adagrad", device="gpu", graph="on")
    assert plan(gpu_job(1), device="gpu", graph="off").step == "reduce"
    assert plan(job(1, 1)).step == "reduce"


def test_the_communicator_of_one_gpu_rank_copies_nothing_to_the_host():
    """What the plan's none builds (training.build.communicator): a device buffer's sum and broadcast at one
    rank are the buffer, with no copy to the host and no wait on the device (the fake device counts them)."""
    from fake_device import FakeBackend
    from mpinn.comm.gpu import DeviceAllreduceCommunicator
    from mpinn.training.build import communicator
    fake = FakeBackend()
    comm = communicator(plan(gpu_job(1), device="gpu"), backend=fake)
    assert isinstance(comm, DeviceAllreduceCommunicator) and comm.transport == "none"
    buf = np.arange(5.0)
    assert comm.Allreduce_sum_(buf, "g") is buf and comm.Bcast_(buf, 0, "p") is buf
    assert fake.syncs == 0 and np.array_equal(buf, np.arange(5.0))
    comm.free()


def test_stale_rows_fetch_through_either_exchange_of_a_sharded_table():
    """--stale-rows 1: auto's exchange is the one it would be without it (node from NODE_FROM nodes on), said on the
    table's line; --shard-exchange node is taken; refused, one line, with a replicated table (asked for, or auto's
    answer on one node) or --graph on."""
    p = plan(job(nodes=4, per_node=2), stale_rows=1)
    assert (p.table, p.exchange) == ("sharded", "node") and "summed in the node" in p.exchange_why
    assert "rows fetched a step ahead (--stale-rows 1" in p.hot_line(0, 0)
    assert "fetched a step ahead" not in plan(job(nodes=4, per_node=2)).hot_line(0, 0)
    assert plan(job(nodes=4, per_node=2), stale_rows=1, shard_exchange="flat").exchange == "flat"
    assert plan(job(nodes=2, per_node=2), stale_rows=1, table="sharded", shard_exchange="node").exchange == "node"
    for refused in (dict(table="replicated"), dict(), dict(table="sharded", graph="on")):
        with pytest.raises(MpinnError, match="^--stale-rows fetches a sharded table's rows a step ahead") as e:
            plan(job(), stale_rows=1, **refused)
        assert e.value.code == 2 and "\n" not in str(e.value)
