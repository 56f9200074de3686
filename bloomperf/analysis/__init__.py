"""Judging and predicting, no I/O: the one verdict rule, statistics, A/B pairs, the memory
model and the roofline."""
