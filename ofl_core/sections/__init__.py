"""Per-notebook bookkeeping, figures and summaries that do not fit in a notebook cell."""
