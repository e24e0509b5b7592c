"""Exports: the formats, their verification against the checkpoint, what they take."""
