"""The DPP task samplers against the k-DPP's exact law, brute-force symmetric polynomials and their schedules."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from lightning_episodes.data import DynamicDPP, StaticDPP, TaskSampler
from lightning_episodes.data.dpp import elementary_symmetric, sample_k_dpp
from tests.helpers import roundtrip

N, WAYS, B = 7, 3, 5


def _spectrum(features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    eigenvalues, eigenvectors = torch.linalg.eigh(features @ features.T)
    return eigenvalues.clamp(min=0.0), eigenvectors


def _exact_law(features: torch.Tensor, k: int) -> dict[tuple[int, ...], float]:
    """P(S) = det(L_S) / sum over all k-sets of det(L_S'), by enumeration."""
    kernel = features @ features.T
    dets = {s: float(torch.det(kernel[list(s)][:, list(s)])) for s in itertools.combinations(range(len(kernel)), k)}
    total = sum(dets.values())
    return {s: d / total for s, d in dets.items()}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0.0, 10.0), min_size=1, max_size=7), st.integers(0, 4))
def test_elementary_symmetric_polynomials_match_the_sum_over_subsets(values: list[float], k: int) -> None:
    table = elementary_symmetric(torch.tensor(values, dtype=torch.float64), k)
    for n in range(len(values) + 1):
        for size in range(k + 1):
            brute = sum(math.prod(c) for c in itertools.combinations(values[:n], size))
            assert table[size, n].item() == pytest.approx(brute, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize(("size", "k", "dim"), [(6, 2, 3), (5, 3, 4)])
def test_the_sampler_draws_each_set_with_probability_det_l_s_over_e_k(size: int, k: int, dim: int) -> None:
    """4,000 draws against the enumerated law (chi-square); the first draw of a seed is the seed's forever."""
    features = torch.randn(size, dim, generator=torch.Generator().manual_seed(size), dtype=torch.float64)
    eigenvalues, eigenvectors = _spectrum(features)
    law = _exact_law(features, k)
    counts = dict.fromkeys(law, 0)
    draws = 4000
    for seed in range(draws):
        items = sample_k_dpp(eigenvalues, eigenvectors, k, torch.Generator().manual_seed(seed))
        assert len(set(items.tolist())) == k
        counts[tuple(sorted(items.tolist()))] += 1
    result = stats.chisquare([counts[s] for s in law], [law[s] * draws for s in law])
    assert result.pvalue > 1e-3, (counts, law)


def test_orthogonal_features_pick_the_sets_in_proportion_to_their_squared_norms() -> None:
    """With orthogonal class features L is diagonal: P(S) is the product of its classes' squared norms over e_k.
    A class of zero features is never drawn."""
    norms = torch.tensor([1.0, 2.0, 3.0, 0.0], dtype=torch.float64)
    features = torch.diag(norms)
    eigenvalues, eigenvectors = _spectrum(features)
    counts: dict[tuple[int, ...], int] = {}
    for seed in range(3000):
        items = tuple(sorted(sample_k_dpp(eigenvalues, eigenvectors, 2, torch.Generator().manual_seed(seed)).tolist()))
        counts[items] = counts.get(items, 0) + 1
    assert set(counts) <= {(0, 1), (0, 2), (1, 2)}
    squares = {(0, 1): 4.0, (0, 2): 9.0, (1, 2): 36.0}  # 1*4, 1*9, 4*9 of e_2 = 49
    result = stats.chisquare([counts.get(s, 0) for s in squares], [v / 49 * 3000 for v in squares.values()])
    assert result.pvalue > 1e-3


@settings(max_examples=30, deadline=None)
@given(st.integers(3, 9), st.integers(1, 3), st.integers(0, 2**31 - 1))
def test_a_draw_takes_a_fixed_count_of_uniforms_and_gives_distinct_items(size: int, k: int, seed: int) -> None:
    features = torch.randn(size, size, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    eigenvalues, eigenvectors = _spectrum(features)
    generator = torch.Generator().manual_seed(seed)
    items = sample_k_dpp(eigenvalues, eigenvectors, k, generator)
    assert len(set(items.tolist())) == k
    assert int(items.min()) >= 0
    assert int(items.max()) < size
    after = torch.rand(1, generator=generator, dtype=torch.float64)
    fresh = torch.Generator().manual_seed(seed)
    torch.rand(size + k, generator=fresh, dtype=torch.float64)
    assert torch.equal(after, torch.rand(1, generator=fresh, dtype=torch.float64))


def _dynamic(**options: int) -> DynamicDPP:
    sampler = DynamicDPP(**{"warmup_steps": 2, "refresh_every": 3, "images_per_class": 1, **options})
    sampler.bind(N, WAYS, B)
    return sampler


def _features(seed: int = 0, dim: int = 4) -> torch.Tensor:
    return torch.randn(N, dim, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_the_dynamic_sampler_is_uniform_in_its_warm_up_then_a_pure_function_of_the_features() -> None:
    sampler, plain = _dynamic(), _dynamic()
    sampler.set_class_features(_features())
    assert torch.equal(sampler.classes(5, 1, range(B)), plain.classes(5, 1, range(B)))  # step 1 < warmup_steps
    whole = sampler.classes(5, 2, range(B))
    assert not torch.equal(whole, plain.classes(5, 2, range(B)))
    assert torch.equal(sampler.classes(5, 2, [3, 4]), whole[3:])  # a rank's slice is the global batch's
    assert all(len(set(row)) == WAYS for row in whole.tolist())
    restored = _dynamic()
    restored.load_state_dict(roundtrip(sampler.state_dict()))
    assert torch.equal(restored.features, sampler.features)  # type: ignore[arg-type]
    assert torch.equal(restored.classes(5, 9, range(B)), sampler.classes(5, 9, range(B)))


def test_the_features_are_asked_for_at_the_end_of_the_warm_up_and_every_refresh() -> None:
    dynamic = _dynamic(warmup_steps=2, refresh_every=3)
    assert [step for step in range(-1, 12) if dynamic.class_features_due(step)] == [1, 4, 7, 10]
    assert [step for step in range(-1, 5) if _dynamic(warmup_steps=0).class_features_due(step)] == [-1, 2]
    static = StaticDPP("reference.ckpt")
    assert [step for step in range(-1, 12) if static.class_features_due(step)] == [-1]
    assert static.class_features_from == "reference.ckpt"
    assert dynamic.class_features_from is None


def test_a_dpp_favours_classes_whose_features_differ() -> None:
    """Two tight groups of classes (0-3 along one axis, 4-6 along another): a 2-class k-DPP almost always takes one
    class of each, where uniform sampling would take a pair of one group 9 times in 21."""
    features = torch.zeros(N, 2, dtype=torch.float64)
    features[:4, 0], features[4:, 1] = 1.0, 1.0
    features += 0.01 * torch.randn(N, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    sampler = DynamicDPP(warmup_steps=0, images_per_class=1)
    sampler.bind(N, 2, 50)
    sampler.set_class_features(features)
    pairs = sampler.classes(0, 0, range(50)).tolist()
    mixed = sum((a < 4) != (b < 4) for a, b in pairs)
    assert mixed >= 48


def test_features_of_fewer_dimensions_than_ways_warn_and_leave_the_classes_uniform() -> None:
    sampler, plain = _dynamic(), _dynamic()
    with pytest.warns(UserWarning, match="span 2 dimensions, fewer than ways=3"):
        sampler.set_class_features(_features(dim=2))
    assert torch.equal(sampler.classes(0, 4, range(B)), plain.classes(0, 4, range(B)))
    with pytest.raises(ValueError, match=r"expected features \[7, D\]"):
        sampler.set_class_features(torch.zeros(3, 4))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: DynamicDPP(warmup_steps=-1), "warmup_steps must be an integer >= 0"),
        (lambda: DynamicDPP(refresh_every=0), "refresh_every must be an integer >= 1"),
        (lambda: DynamicDPP(images_per_class=0), "images_per_class must be an integer >= 1"),
        (lambda: StaticDPP("x.ckpt", images_per_class=True), "images_per_class must be an integer >= 1"),
    ],
)
def test_dpp_arguments_are_named(make: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()  # type: ignore[operator]


def test_samplers_that_read_no_features_refuse_them() -> None:
    class Plain(TaskSampler):
        def classes(self, seed: int, step: int, episodes: object) -> torch.Tensor:
            raise AssertionError

    assert not Plain.needs_class_features
    assert not Plain().class_features_due(-1)
    with pytest.raises(NotImplementedError, match="Plain reads no class features"):
        Plain().set_class_features(torch.zeros(1, 1))
