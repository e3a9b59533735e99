"""Training utilities: optimizers, learning-rate schedules, losses and weight conversion."""
