"""Predicted data-parallel efficiency of W1 and W2 at 8..1024 ranks, from speeds measured here.

    python -m scripts.bench.cluster_model [--network scripts/results/multihost-probe-DATE.json]
        [--ranks-per-node 1,8] [--levers]
        [scripts/results/bench-scaling-DATE.json [scripts/results/bench-alltoallv-DATE.json]]

The package: costs.py (the formulas below: what each exchange costs), w2_loads.py (W2's exchange counted from its
data), model.py (the measurements read and the curves drawn from them), report.py (tables, plot, JSON), levers.py
(--levers: issue 63's node-sum and one-step-stale levers with bf16 rows, and its targets), and __main__.py (the
command line).

Inputs (no number is taken from a table; the one assumed network is labelled "assumed"). Every bandwidth B
is bytes that CROSS per second, one direction (mpinn/bench/crossing.py): each fit is re-made here from the
stored points with the sizes converted to the bytes a rank sends to the others (an Alltoallv of n bytes a
rank split over P ranks, itself included: n (P - 1) / P; an Allreduce of n: 2 (P - 1) / P n; an Allgatherv
of n a rank: (P - 1) n), and every cost below divides crossing bytes by it. (Before 2026-12-02 the Alltoallv
fits were against n: at np 2 twice the crossing rate, so the link and shared memory counted twice as fast.)
  * Allreduce and Allgatherv latency alpha and bandwidth B: the fit t = alpha + x / B over the
    256 B .. 16 MiB sweep that scripts/bench/scaling.py runs at np = 2 (in its JSON; at np 2 x = n for both);
  * Alltoallv latency and bandwidth (the same fit), the latency of an Alltoall of P counts, and the
    cost of each further message in flight (persistent sends posted together), from
    scripts/bench/alltoallv.py at np = 2 (its JSON), for the sharded table;
    these two files are this machine's shared memory: the cost of a collective INSIDE a node;
  * the network between nodes: the lab's two-host probe, scripts/results/multihost-probe-*.json (the
    newest, or --network FILE): its 2 hosts x 1 rank points re-fitted (Alltoallv and Allreduce alpha/B,
    the latency of an Alltoall of counts and, in probes from 2026-12-02 on, the cost of each further
    message in flight across the link: persistent sends posted together, as for shared memory),
    measured with MPI over TCP between network namespaces joined by veths on ONE machine, the link's
    rate shaped (its "link" entry says how); latency is NOT shaped (netem is missing from this kernel),
    so alpha is a veth's + TCP's, not a switch's or a cable's. Without that file only the
    assumed network is modelled. The assumed one: 10 GbE, alpha = 30 us, B = 1.1 GB/s for every
    collective (the model's earlier scenario, kept for before/after comparisons);
  * W2's own data (the peers' generator, hashed; w2_loads.py): P slices of 512 rows, nodes of
    R consecutive ranks: each rank's unique ids, each node's deduplicated union, the hot set of
    --hot-rows auto (ids whose count / rows counted x 512 >= 4, at most 32768, counted over all
    1024 x 512 rows), the rows the busiest owner gathers and the gradient rows it receives, and the
    bytes each node's link carries per step for each scheme (its busier direction);
  * compute time per sample: W1 and W2 at np = 1 in the bench-scaling JSON (the bench's compute_ms,
    forward, backward and update, divided by the global batch);
  * W2's update cost per gradient row (the SGD rows kernel), of one dense pass over the table, of gathering a
    row (np.take; with bf16 rows Wire.take, the gather and the cast in one pass), of casting a row element to
    bfloat16 and back (mpinn.comm.wire.Wire with the kernels' codec, what --wire-rows bf16 does), of summing
    a relay's gradient rows per id in the canonical tree over its node's ranks (mpinn.optim.fused.coalesce_rows, per
    element: what node-sum adds), and the ids' bookkeeping of the flat and the node exchange (mpinn's own fetch and
    send_back in one process, rows one element wide: a fixed cost and a cost an id, scripts/bench/exchange_cpu.py):
    timed here, each with what mpinn calls.

Assumptions (the model is only as good as these):
  1. Weak scaling, as Horovod measured it: the per-rank batch stays fixed (W1 128 rows, W2 512 rows,
     the np = 2 split of the peers' global batches), so compute per rank per step is constant; all
     R ranks of a node compute at once, so a node's compute per step is one rank's.
  2. R ranks per node (--ranks-per-node), ranks numbered node by node. Inside a node a collective
     costs what it costs here over shared memory (as measured at np = 2: the R ranks' concurrent
     copies are assumed not to slow each other); between nodes it costs the network's alpha per
     message and B for the bytes, and the R ranks of a node SHARE one link: the bytes term is the
     busiest node's bytes (its busier direction; the link is full duplex) / B. The legacy table
     (the first one printed) is one rank per node with the network = this machine's shared memory,
     plus the assumed 10 GbE, as before.
  3. Ring algorithms: Allreduce of n bytes takes 2 (P-1)/P n/B + 2 (P-1) alpha; Allgather(v) of a
     total of m bytes takes (P-1)/P m/B + (P-1) alpha (with nodes: every one of the P - 1 steps waits
     for the step's inter-node hop, P - 1 network alphas). Real MPIs switch to tree/recursive-doubling
     algorithms for small messages (log P latency), so for small n this is pessimistic.
  4. No overlap of communication with compute (mpinn's --overlap measured no gain here; see the
     report; the one-step-stale exchange of --levers is the exception, levers.py): step = compute + exchange
     (+ W2's update beyond one rank's own rows), and efficiency =
     compute / step, against one rank with no exchange. The floor printed beside each prediction is
     physics, not a model: compute / max(compute, the busiest node's inter-node bytes per step / B),
     the best any overlap of everything could reach; every prediction is at or below it.
  5. Exchanges (legacy table): dense = float32 ring Allreduce of the whole gradient (W2: the table
     too); fp16 = a ring Allreduce of 16-bit words; fp16-allgather = mpinn's own --compress, one
     Allgather of every rank's 16-bit words; sparse (W2) = Allgatherv of every rank's touched rows
     (~3,120 rows of 64 floats + an int64 id per 512-row slice), then each rank applies all P x 3,120
     rows; the density rule switches to dense once the gathered rows exceed a quarter of the table.
  6. Unique rows per rank do not shrink with P, and no rank is slower than another (no stragglers).
  7. W2 sharded (--table sharded), per step, four schemes:
       flat      today's exchange: Alltoall of P counts (Bruck: ceil(log2 P) rounds, the first
                 ceil(log2 R) inside the node), Alltoallv of ids (8 B), rows back (256 B), gradient
                 rows (256 B): each rank has R - 1 peers on its node and P - R off it per Alltoallv;
       node      --shard-exchange node: ids to the node's relay (the rank with the owner's local
                 index; Alltoall of R counts + Alltoallv in the node); the relay sends them, per
                 asking rank, to the N - 1 other relays of its local index (Alltoall of N x R counts,
                 Alltoallv of ids), which answer each node once per distinct row (only the node's
                 unique rows cross); rows back in the node; gradient rows to the relay, then across
                 UNSUMMED along the same counts (one Alltoallv). Inter-node messages per rank 4 (N - 1)
                 against flat's 4 (P - R); at R = 1 it is the flat exchange (mpinn uses flat there);
       hot       --hot-rows auto: ids still all sent (to route gradient rows), rows back only for the
                 tail ids, hot gradient rows to their round-robin owners, then one Allgatherv of the
                 hot block (K x 256 B) by MPICH's choice: recursive doubling below 512 KiB (log2 P
                 rounds, but every rank of a node sends its blocks over the shared link, R times the
                 ring's bytes), ring above (P - 1 steps, each an inter-node hop: assumption 3);
       node+hot  both;
       node-sum  node, with the gradient rows summed at the relay before they cross (issue 63's lever,
                 modelled before mpinn has it): ids and gradient rows between nodes once per distinct
                 row of the node and owner node, as the rows fetched; counts once per relay pair; inside
                 the node as node; the relay's tree sum timed per element, its casts on bf16.
     Every exchange also Allreduces the 129-float dense tail (recursive doubling: ceil(log2 R)
     rounds in the node, ceil(log2 N) between nodes). Messages of one Alltoallv: in the node, the
     measured latency for the first and the measured in-flight cost for each further one; between
     nodes, the network's alpha for the first and its measured in-flight cost for each further one (a
     probe from before 2026-12-02 has no in-flight points: then the alpha for every one, one after
     another; the assumed 10 GbE always so), and the
     intra- and inter-node messages of a flat Alltoallv do not overlap either. The busiest owner's
     work (measured per-row costs): gathering the rows it answers, updating the gradient rows beyond
     one slice's; and the ids' bookkeeping, for the largest of its ids as an asking rank, a relay and an
     owner (an upper bound: the per-id cost measured with each id in all three roles).
     Each scheme twice, by the rows' format on the wire (--wire-rows, mpinn/comm/wire.py): fp32 (ids 8 B, rows
     256 B) and bf16 (ids 4 B, rows and gradient rows 128 B, in the node and between nodes; the counts, the
     hot block's refresh and the dense tail stay as they are), the floor from the same halved bytes. bf16 adds
     the busiest owner's casts (per element, timed): it encodes the rows it answers, its own gradient rows
     and its replicas of the hot rows it uses, and decodes the rows it receives and the gradient rows it
     owns (a relay passes 16-bit rows on as they came).
  8. Legacy "sharded" (shared memory, one rank per node): as the flat scheme with the measured
     in-flight cost between every two messages; "sharded, no overlap": the latency for each.
Horovod's published point: ~90% scaling efficiency at 512 GPUs for Inception V3 and ResNet-101
(Sergeev & Del Balso 2018, "Horovod: fast and easy distributed deep learning in TensorFlow",
arXiv:1802.05799), on 25 GbE RoCE with NVLink-local GPUs and compute of ~100s of ms per step: a
far larger compute-to-communication ratio than W1/W2's milliseconds.
"""
