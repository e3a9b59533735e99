"""NFNet for MindSpore: models, data, optimizers, schedules and training cells."""
