"""The tools of the ``lightning-episodes`` console script besides ``fit``/``validate``/``test``: one module per
command, each a jsonargparse parser and ``main(argv) -> int`` over the library's functions.

- :mod:`~lightning_episodes.commands.difficulty`: score fixed episodes with a checkpoint (a CSV row per episode);
- :mod:`~lightning_episodes.commands.report`: the paper's results tables from ``test_results.json`` files;
- :mod:`~lightning_episodes.commands.compare`: the paired per-episode difference of sampling schemes against a baseline;
- :mod:`~lightning_episodes.commands.predict`: classify your own images with a checkpoint;
- :mod:`~lightning_episodes.commands.configs`: the shipped configs (``--config`` takes their names), listed or copied.

A command raises on a user error (``argparse.ArgumentError`` for an argument the parser rejects, ``ValueError`` or
``FileNotFoundError`` for a value or file it cannot use): :mod:`lightning_episodes.console` reports it in one line
with exit status 2.
"""
