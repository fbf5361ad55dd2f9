"""What is learnt from the training rows before training: the labels' task and classes (labels), the numeric
columns' statistics (stats), the transform and bins fitted from them (transform, bins), in the one pass over a
table that hashes it (chunks.TablePass)."""
