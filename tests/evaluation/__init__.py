"""Tests of lightning_episodes.evaluation."""
