"""The training run: data, model parallelism, precision, the loop, evaluation and checkpoints."""
