"""Tests of lightning_episodes.analysis."""
