"""The leaves every layer uses: the error types (errors), the model specification (spec), the batches (batch)."""
