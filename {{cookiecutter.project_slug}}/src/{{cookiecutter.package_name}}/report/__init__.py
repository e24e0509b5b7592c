"""What a run leaves: summary.json, the end-of-run lines, plots; and evaluate.py's scores."""
