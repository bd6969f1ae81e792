"""Where checkpoints, data and models are kept: a local directory, or an object store through fsspec."""
