"""Tests of lightning_episodes.weighting."""
