"""Cluster validation: every node of an allocation validated, one all-reduce, bad nodes named."""
