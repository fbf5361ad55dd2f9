"""The cluster model: python -m scripts.bench.cluster_model (__main__.py says what it models)."""
