"""Tasks: what is learnt from the targets (loss, metrics, outputs, baselines, plots)."""
