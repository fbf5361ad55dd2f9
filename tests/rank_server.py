"""Ranks kept warm for the suite's multi-rank commands: `mpiexec -n N python tests/rank_server.py DIR` starts N ranks
that import mpinn once, then run one command after another, each as `mpiexec -n N python -m MODULE ARGS` would
(tests/launch.py's in_process on every rank). Started and fed by launch.Ranks.

The protocol is files in DIR, so that an idle rank sleeps instead of spinning in MPI: request K is K.json ({module,
argv, cwd, env}); each rank runs it with its standard streams in K.RANK.out and K.RANK.err, then writes its exit
status to K.RANK.rc. A command that aborts the job (an error on one rank, a deadline) ends the server as it would end
a real launch; the client reads what the ranks wrote and starts a new server for the next command."""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import launch  # noqa: E402
from mpi4py import MPI  # noqa: E402

import mpinn.train  # noqa: E402,F401  (what every command imports: once, here)

POLL = (0.001, 0.05)    # seconds between an idle rank's looks for the next request: from the first to the most


def wait_for(path):
    """Until path is there: looked for often at first, then less (an idle rank costs next to nothing)."""
    pause = POLL[0]
    while not os.path.exists(path):
        time.sleep(pause)
        pause = min(pause * 1.5, POLL[1])


def serve(directory):
    rank = MPI.COMM_WORLD.rank
    k = 0
    while True:
        k += 1
        request = os.path.join(directory, "%d.json" % k)
        wait_for(request)
        with open(request) as f:
            req = json.load(f)
        if req.get("stop"):
            return
        stem = os.path.join(directory, "%d.%d" % (k, rank))
        code = launch.run_here(req["module"], req["argv"], req["env"], req["cwd"], stem + ".out", stem + ".err")
        with open(stem + ".rc.tmp", "w") as f:
            f.write(str(code))
        os.replace(stem + ".rc.tmp", stem + ".rc")


if __name__ == "__main__":
    serve(sys.argv[1])
