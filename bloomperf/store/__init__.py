"""The stores: results, baselines and history, one reader and one writer per document kind,
schema-versioned JSON."""
