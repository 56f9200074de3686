"""The history site: an index of verdicts and one trend page per cell."""
