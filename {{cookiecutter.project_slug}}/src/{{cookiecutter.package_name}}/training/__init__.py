"""Training: the command line, the callbacks that guard a run, checkpoints and resume."""
