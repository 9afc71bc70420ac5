"""Benchmarks that compare lightning-episodes side by side with a peer in the same run (see benchmarks/README.md)."""
