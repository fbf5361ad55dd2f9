"""The model's math: the MLP (mlp), periodic embeddings of numeric columns (periodic), the metrics (metrics)."""
