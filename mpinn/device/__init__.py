"""The accelerator: the array backend (numpy, or cupy on a GPU) and its hand-written kernels. The only cupy importer."""
