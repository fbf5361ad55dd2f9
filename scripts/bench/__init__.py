"""Benchmarks and studies: each module runs as python -m scripts.bench.NAME (see its --help); common.py is
what they share. They write their results under scripts/results/."""
