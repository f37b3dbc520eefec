"""Per-notebook bookkeeping, summaries and figures that do not fit in a notebook cell."""
