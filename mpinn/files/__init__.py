"""The files a run writes: model files and checkpoints (checkpoint), the curve and its report (report), TensorBoard
events (events), and how an output is written whole and claimed (outputs)."""
