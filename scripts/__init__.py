"""The repository's scripts, run from the repository root as modules (python -m scripts.bench.revs A B):

    bench/      benchmarks and studies: mpinn against its peers, scaling, the cluster model, real data
    lab/        the multi-host lab on one machine: network namespaces as hosts (netns.py, netns_ssh)
    results/    the measurements the docs cite (bench/ writes new ones here)
    slurm/      train.sbatch, the batch script to copy for a Slurm cluster
    api_example.py, options_reference.py   the Python API's example (docs/api.md) and docs/options.md's writer

ROOT and RESULTS are the paths every script writes and reads by."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "scripts", "results")
