"""The training run around the train step: checkpoints and resume, callbacks, the run directory, preemption,
metrics and curves, logging, the progress bar, the console filter, the device context and ModelArts copies."""
