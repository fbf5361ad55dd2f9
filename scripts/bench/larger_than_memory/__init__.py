"""Training from a file larger than memory: python -m scripts.bench.larger_than_memory (see __main__.py)."""
