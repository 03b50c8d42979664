"""Markdown, plots and diffs from saved results, and the TensorBoard server; importing no torch."""
