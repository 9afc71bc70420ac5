"""The callbacks every run of the command line gets: a non-finite guard, the test record's writer, the handler of
preemption (``SIGTERM``, ``SIGINT``, ``SIGUSR1``) and the feedback of an adaptive task sampler (idle without one).

``lightning-episodes fit|validate|test`` adds each of them to a Trainer whose ``trainer.callbacks`` has none of its
own (list one there to change its options). A Trainer built in Python gets only the callbacks it is given:

    >>> import pytorch_lightning as pl
    >>> [type(callback).__name__ for callback in default_callbacks()]
    ['NonFiniteGuard', 'TestResultsWriter', 'PreemptionHandler', 'TaskSamplerFeedback']
    >>> trainer = pl.Trainer(max_steps=10, callbacks=[NonFiniteGuard(max_consecutive=3), *default_callbacks()])
    ... # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Iterable

from pytorch_lightning.callbacks import Callback

from lightning_episodes.callbacks.nonfinite import NonFiniteGuard
from lightning_episodes.callbacks.preemption import PreemptionHandler
from lightning_episodes.callbacks.results import TestResultsWriter
from lightning_episodes.callbacks.task_sampling import TaskSamplerFeedback

__all__ = ["DEFAULT_CALLBACKS", "default_callbacks"]

#: The classes of the callbacks every command-line run gets, in the order they are added.
DEFAULT_CALLBACKS: tuple[type[Callback], ...] = (
    NonFiniteGuard,
    TestResultsWriter,
    PreemptionHandler,
    TaskSamplerFeedback,
)


def default_callbacks(present: Iterable[Callback] = ()) -> list[Callback]:
    """A new instance, with its default options, of each of :data:`DEFAULT_CALLBACKS` that ``present`` lacks.

    Args:
        present: the callbacks a Trainer already has (an instance of a subclass counts).

    Returns:
        A :class:`~lightning_episodes.callbacks.NonFiniteGuard` (skips non-finite training steps, stops a diverged
        run), a :class:`~lightning_episodes.callbacks.TestResultsWriter` (writes ``test_results.json`` and
        ``test_episodes.csv`` after a test), a :class:`~lightning_episodes.callbacks.PreemptionHandler` (stops a
        fit on ``SIGTERM``, ``SIGINT`` or ``SIGUSR1`` at the same step in every process) and a
        :class:`~lightning_episodes.callbacks.TaskSamplerFeedback` (feeds an adaptive ``data.task_sampler``; idle
        without one), each unless ``present`` has one.
    """
    present = list(present)
    return [cls() for cls in DEFAULT_CALLBACKS if not any(isinstance(callback, cls) for callback in present)]
