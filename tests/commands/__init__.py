"""Tests of lightning_episodes.commands: the programs behind `lightning-episodes compare`, `difficulty`, `predict` and
`report`."""
