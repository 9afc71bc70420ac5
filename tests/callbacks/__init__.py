"""Tests of the Lightning callbacks."""
