"""Per-episode difficulty tables: one row per scored episode, saved as CSV (§4.2 analyses).

A table records, for each episode a model scored, the episode's identity (its ordered class list and,
per class, its support and query sample indices — enough to rebuild it) with its difficulty and
accuracy. Two tables of the same episodes scored by different models are aligned with
:func:`join_on_episode` before comparing them, e.g. with
:func:`~lightning_episodes.analysis.rank_correlation`.

CSV layout (header row, then one row per episode)::

    episode_id,classes,support_indices,query_indices,difficulty,accuracy
    0,"[3, 17]","[[120, 131], [402, 415]]","[[122], [409]]",1.2345,0.5

Identity cells are JSON lists (per class for the indices); floats are written with ``repr`` so a
round trip is exact; an unknown accuracy is an empty cell. Extra columns are ignored when reading.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from lightning_episodes.evaluation._arrays import ArrayLike, raw_numpy, to_numpy

__all__ = ["COLUMNS", "DifficultyTable", "EpisodeRecord", "JoinedDifficulties", "join_on_episode"]

#: Column order of a written table.
COLUMNS = ("episode_id", "classes", "support_indices", "query_indices", "difficulty", "accuracy")

Indices = tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class EpisodeRecord:
    """One scored episode.

    Args:
        episode_id: the episode's id in its stream (unique within a table).
        classes: ordered global class ids; label ``j`` is ``classes[j]``.
        support_indices: per class, the dataset rows of its support samples.
        query_indices: per class, the dataset rows of its query samples.
        difficulty: the episode's difficulty (its query loss) under the scoring model.
        accuracy: its query accuracy under that model, or ``None`` if unknown.

    Fields are normalised on construction (Python ints and floats, nested tuples), so numpy or torch
    scalars and lists may be passed.
    """

    episode_id: int
    classes: tuple[int, ...]
    support_indices: Indices
    query_indices: Indices
    difficulty: float
    accuracy: float | None = None

    def __post_init__(self) -> None:
        # frozen: normalise through object.__setattr__ so records compare, hash and serialise cleanly
        object.__setattr__(self, "episode_id", int(self.episode_id))
        object.__setattr__(self, "classes", tuple(int(c) for c in self.classes))
        object.__setattr__(self, "support_indices", _nested(self.support_indices))
        object.__setattr__(self, "query_indices", _nested(self.query_indices))
        object.__setattr__(self, "difficulty", float(self.difficulty))
        if self.accuracy is not None:
            object.__setattr__(self, "accuracy", float(self.accuracy))

    def same_episode(self, other: EpisodeRecord) -> bool:
        """Whether ``other`` describes the same episode (same classes, support and query)."""
        return (self.classes, self.support_indices, self.query_indices) == (
            other.classes,
            other.support_indices,
            other.query_indices,
        )


@dataclass(frozen=True)
class DifficultyTable:
    """An ordered collection of :class:`EpisodeRecord` with unique episode ids.

    Raises:
        ValueError: if two records share an episode id.

    Example::

        >>> table = DifficultyTable.from_arrays(
        ...     episode_ids=[0, 1], classes=[[3, 7], [1, 2]],
        ...     support_indices=[[[10], [30]], [[5], [8]]], query_indices=[[[11], [31]], [[6], [9]]],
        ...     difficulty=[1.25, 0.5], accuracy=[0.5, 1.0])
        >>> len(table), table.difficulty.tolist(), table.records[0].classes
        (2, [1.25, 0.5], (3, 7))
    """

    records: tuple[EpisodeRecord, ...]

    def __post_init__(self) -> None:
        ids = [record.episode_id for record in self.records]
        if len(set(ids)) != len(ids):
            repeated = sorted({i for i in ids if ids.count(i) > 1})[:5]
            raise ValueError(f"episode ids must be unique within a table; repeated: {repeated}")

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[EpisodeRecord]:
        return iter(self.records)

    @property
    def episode_ids(self) -> np.ndarray:
        """``[N]`` int64 episode ids, in table order."""
        return np.array([r.episode_id for r in self.records], dtype=np.int64)

    @property
    def difficulty(self) -> np.ndarray:
        """``[N]`` float64 difficulties, in table order."""
        return np.array([r.difficulty for r in self.records], dtype=np.float64)

    @property
    def accuracy(self) -> np.ndarray:
        """``[N]`` float64 accuracies (``nan`` where unknown), in table order."""
        return np.array([_accuracy(r) for r in self.records], dtype=np.float64)

    @classmethod
    def from_arrays(
        cls,
        episode_ids: ArrayLike,
        classes: ArrayLike,
        support_indices: ArrayLike,
        query_indices: ArrayLike,
        difficulty: ArrayLike,
        accuracy: ArrayLike | None = None,
    ) -> DifficultyTable:
        """Build a table from batched arrays or tensors, e.g. an ``EpisodeIdentity``'s fields.

        Args:
            episode_ids: ``[N]`` integer ids.
            classes: ``[N, ways]`` class ids.
            support_indices: ``[N, ways, shots]`` support rows (or nested lists, per class).
            query_indices: ``[N, ways, queries]`` query rows (or nested lists, per class).
            difficulty: ``[N]`` difficulties.
            accuracy: ``[N]`` accuracies, or ``None`` (unknown).

        Raises:
            ValueError: if the lengths differ or an episode id repeats.
        """
        ids = raw_numpy(episode_ids).tolist()
        columns: dict[str, list[Any]] = {
            "classes": _as_list(classes),
            "support_indices": _as_list(support_indices),
            "query_indices": _as_list(query_indices),
            "difficulty": to_numpy(difficulty).reshape(-1).tolist(),
            "accuracy": [None] * len(ids) if accuracy is None else to_numpy(accuracy).reshape(-1).tolist(),
        }
        for name, column in columns.items():
            if len(column) != len(ids):
                raise ValueError(f"`{name}` has {len(column)} rows but `episode_ids` has {len(ids)}")
        return cls(
            tuple(
                EpisodeRecord(
                    episode_id=ids[i],
                    classes=columns["classes"][i],
                    support_indices=columns["support_indices"][i],
                    query_indices=columns["query_indices"][i],
                    difficulty=columns["difficulty"][i],
                    accuracy=columns["accuracy"][i],
                )
                for i in range(len(ids))
            )
        )

    def write(self, path: str | os.PathLike[str]) -> None:
        """Write the table as CSV (see the module docstring for the layout)."""
        with open(path, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(COLUMNS)
            for r in self.records:
                writer.writerow(
                    [
                        r.episode_id,
                        json.dumps(list(r.classes)),
                        json.dumps([list(row) for row in r.support_indices]),
                        json.dumps([list(row) for row in r.query_indices]),
                        repr(r.difficulty),
                        "" if r.accuracy is None else repr(r.accuracy),
                    ]
                )

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> DifficultyTable:
        """Read a table written by :meth:`write` (a missing or empty ``accuracy`` reads as ``None``).

        Raises:
            ValueError: if a required column is missing or a cell cannot be parsed (with its line).
        """
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            missing = [c for c in COLUMNS[:-1] if c not in (reader.fieldnames or [])]
            if missing:
                raise ValueError(f"{os.fspath(path)!r} lacks the column(s) {missing}")
            records = []
            for row in reader:
                try:
                    records.append(_parse_row(row))
                except (ValueError, TypeError) as error:
                    raise ValueError(f"{os.fspath(path)!r} line {reader.line_num}: {error}") from error
        return cls(tuple(records))


@dataclass(frozen=True)
class JoinedDifficulties:
    """Two models' scores of the same episodes, aligned row by row (in ``table_a``'s order).

    Args:
        episode_ids: ``[N]`` int64 ids of the shared episodes.
        difficulty_a: ``[N]`` difficulties under model A.
        difficulty_b: ``[N]`` difficulties under model B.
        accuracy_a: ``[N]`` accuracies under model A (``nan`` where unknown).
        accuracy_b: ``[N]`` accuracies under model B (``nan`` where unknown).
    """

    episode_ids: np.ndarray
    difficulty_a: np.ndarray
    difficulty_b: np.ndarray
    accuracy_a: np.ndarray
    accuracy_b: np.ndarray

    def __len__(self) -> int:
        return int(self.episode_ids.size)


def join_on_episode(
    table_a: DifficultyTable, table_b: DifficultyTable, require_same_episodes: bool = True
) -> JoinedDifficulties:
    """Align two models' difficulty tables by episode id (§4.2 transfer analyses).

    Args:
        table_a: scores of model A; its order is the output order.
        table_b: scores of model B, in any order.
        require_same_episodes: if ``True`` (default) both tables must hold exactly the same ids;
            if ``False`` only the ids present in both are kept.

    Returns:
        :class:`JoinedDifficulties`.

    Raises:
        ValueError: if an id present in both tables has a different identity (classes, support or
            query indices: they were not the same episode), if ``require_same_episodes`` and the id
            sets differ, or if no id is shared.

    Example::

        >>> a = DifficultyTable((EpisodeRecord(0, (1, 2), ((5,), (9,)), ((6,), (8,)), 0.75),
        ...                      EpisodeRecord(1, (2, 3), ((7,), (4,)), ((1,), (3,)), 1.5)))
        >>> b = DifficultyTable(tuple(reversed(a.records)))
        >>> join_on_episode(a, b).episode_ids.tolist()
        [0, 1]
    """
    by_id = {record.episode_id: record for record in table_b}
    ids_a = {record.episode_id for record in table_a}
    if require_same_episodes and ids_a != by_id.keys():
        only_a, only_b = sorted(ids_a - by_id.keys()), sorted(by_id.keys() - ids_a)
        raise ValueError(
            f"the tables score different episodes: {len(only_a)} id(s) only in table_a {only_a[:5]}, "
            f"{len(only_b)} only in table_b {only_b[:5]} (pass require_same_episodes=False to intersect)"
        )
    pairs = [(a, by_id[a.episode_id]) for a in table_a if a.episode_id in by_id]
    if not pairs:
        raise ValueError("the tables share no episode id")
    for a, b in pairs:
        if not a.same_episode(b):
            raise ValueError(
                f"episode id {a.episode_id} is a different episode in the two tables "
                f"(classes {a.classes} vs {b.classes}, or different support/query indices)"
            )
    return JoinedDifficulties(
        episode_ids=np.array([a.episode_id for a, _ in pairs], dtype=np.int64),
        difficulty_a=np.array([a.difficulty for a, _ in pairs], dtype=np.float64),
        difficulty_b=np.array([b.difficulty for _, b in pairs], dtype=np.float64),
        accuracy_a=np.array([_accuracy(a) for a, _ in pairs], dtype=np.float64),
        accuracy_b=np.array([_accuracy(b) for _, b in pairs], dtype=np.float64),
    )


def _as_list(values: ArrayLike) -> list[Any]:
    """Per-episode rows of a batched array, tensor or nested sequence."""
    if hasattr(values, "detach") or isinstance(values, np.ndarray):
        return raw_numpy(values).tolist()
    return list(values)


def _nested(rows: Any) -> Indices:
    return tuple(tuple(int(i) for i in row) for row in rows)


def _parse_row(row: dict[str, str]) -> EpisodeRecord:
    accuracy = (row.get("accuracy") or "").strip()
    return EpisodeRecord(
        episode_id=int(row["episode_id"]),
        classes=tuple(int(c) for c in json.loads(row["classes"])),
        support_indices=_nested(json.loads(row["support_indices"])),
        query_indices=_nested(json.loads(row["query_indices"])),
        difficulty=float(row["difficulty"]),
        accuracy=float(accuracy) if accuracy else None,
    )


def _accuracy(record: EpisodeRecord) -> float:
    return math.nan if record.accuracy is None else record.accuracy
