"""Training: the run loop, its config, checkpoints, gradient sync, evaluation and metrics."""
