"""The tuning extra: sweep.py's search space, Optuna study, trials and report."""
