"""Optimization: SGD with adaptive gradient clipping (sgd_agc), the optimizer factory and the learning-rate schedules."""
