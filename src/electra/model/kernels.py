"""The hardware paths of the model: dropout and attention, chosen once for a device.

Two entries. ``FAST_CPU`` is what CPU training runs: dropout masks cut from 64-bit random
words, four 16-bit lanes each (each element dropped with probability round(p * 65536) /
65536, 0.1 -> 0.100006, kept ones scaled by 1 / (1 - that)); one RNG draw serves four
elements, which makes masks ~7x cheaper than torch's Bernoulli ones, and those cost ~1/10 of
a CPU training step. Attention with dropout is written out, softmax(q k^T / sqrt(hs) + mask)
v with lane dropout on the probabilities: SDPA falls back to its math kernel there anyway,
and that kernel's Bernoulli masks cost ~8% of a CPU step (bench/RESULTS.md); without dropout
too in training on short rows (:func:`writes_short`), where SDPA's CPU backward is slower.
``REFERENCE`` is torch's own: ``F.dropout`` and SDPA with its dropout (fused kernels on a GPU).

:func:`kernels_for` picks the entry for a device (the runtime asks once; the model is built
with it); this module is the only one that looks at a device's type. In evaluation both
entries run SDPA and agree; in training without dropout they agree within rounding.

Each forward also gets a :class:`Layout` from :meth:`Kernels.layout`: a batch without padding
attends without a mask (:class:`Padded` ``(None)``, FlashAttention's case on a GPU); a padded
one is unpadded (:class:`Unpadded`): its real tokens packed after the embeddings, the blocks
computing those alone, attention per sequence (FlashAttention's varlen kernel where the entry
allows it, else over the repadded rows with the mask), the heads reading the hidden states
repadded with zeros. ``unpad=False`` keeps every position (:class:`Padded` with the mask).
A local block (ModernBERT's: keys at most ``window`` away) attends through
:func:`local_attention`, blocks of ``2·window`` queries against their ``4·window`` keys,
where the row holds at least ``8·window`` tokens and no attention dropout is asked (below
that the dense band is as fast: ``bench/local_attention.py``); otherwise the dense T x T
scores with the band mask. A head that reads each row's first position alone ([CLS]) has
the last block compute that position alone after its fused query/key/value projection
(:meth:`Layout.first`, MosaicBERT's last-layer subset).

``vocab_multiple``: the objectives' vocabulary-wide GEMM (the generator's output layer) runs
on a table padded with zero rows to a multiple of it, the extra logits -inf (never sampled,
no loss, no gradient); a GPU's tensor cores want aligned widths (64 on ``REFERENCE``). The
stored table, checkpoints and exports keep the real vocabulary.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F


def lane_dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    """Training-mode dropout of ``x`` with masks cut from 16-bit lanes (CPU tensors). In a
    compiled step too: ELECTRA-Small's compiled step ran 0.93-0.96 s with them against
    1.18-1.23 s with torch's masks (batch 32 x 128, bf16, Intel Xeon AMX, bench/host_cost.py)."""
    threshold = round(p * 65536) - 32768  # keep where the int16 lane >= this
    scale = 1.0 / (1.0 - round(p * 65536) / 65536)
    if x.dim() and x.shape[-1] % 4 == 0:  # the words shaped as x's rows: one view, no slice
        words = torch.randint(-(2**63), 2**63 - 1, (*x.shape[:-1], x.shape[-1] // 4))
        lanes = words.view(torch.int16)  # x's shape
    else:
        n = x.numel()
        words = torch.randint(-(2**63), 2**63 - 1, ((n + 3) // 4,))
        lanes = words.view(torch.int16)[:n].view(x.shape)
    keep = lanes >= threshold
    return x.mul(keep).mul_(scale)


def torch_dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    """Training-mode dropout, torch's Bernoulli masks."""
    return F.dropout(x, p, True)


def written_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      attn_mask: torch.Tensor | None, dropout: torch.nn.Module,
                      bias: torch.Tensor | None = None, scale: float | None = None
                      ) -> torch.Tensor:
    """softmax(q k^T * scale + bias + mask) v with ``dropout`` on the probabilities:
    (B, nh, T, hs); ``scale`` 1 / sqrt(hs) unless given, ``bias`` an additive (B, nh, T, T)
    (DeBERTa's position terms). The products run in the input dtype (bf16 under autocast),
    the softmax in fp32. ``attn_mask`` (B, 1, 1, T) bool, True on keys to attend."""
    scores = (q * (q.shape[-1] ** -0.5 if scale is None else scale)) @ k.transpose(-2, -1)
    if bias is not None:
        scores = scores + bias
    if attn_mask is not None:
        scores = torch.where(attn_mask, scores, float("-inf"))
    probs = dropout(torch.softmax(scores, -1, dtype=torch.float32))
    return probs.to(v.dtype) @ v


def _varlen_attn() -> Callable[..., torch.Tensor] | None:
    """torch's FlashAttention over packed sequences (``torch.nn.attention.varlen``, CUDA, 16-bit
    inputs), where this torch has it."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


class Layout:
    """Which tokens of a (B, T) batch the blocks compute, and how they attend. Built once per
    forward by :meth:`Kernels.layout`; the blocks run on ``tokens(x)``, the heads read
    ``repad(x)``."""

    def tokens(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def repad(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def attend(self, kernels: Kernels, qkv: torch.Tensor, num_heads: int, p: float,
               dropout: torch.nn.Module, window: int | None = None) -> torch.Tensor:
        """Attention from fused projections; ``window``: each token attends only to those at
        most ``window`` positions away in its row (a local block), None: the whole row."""
        raise NotImplementedError

    def positions(self, x: torch.Tensor) -> torch.Tensor:
        """Each token's position in its row, shaped as ``x``'s token dims (or broadcast to
        them): what rotary embeddings read."""
        raise NotImplementedError

    def row_positions(self) -> torch.Tensor | None:
        """(B, T) each token's position in its sequence where rows are packed (what position
        tables read); None: every row is one sequence from position 0."""
        return None

    def reads_first(self) -> bool:
        """Whether :meth:`first` and :meth:`attend_first` can serve a head that reads each
        row's first position alone."""
        return True

    def first(self, x: torch.Tensor) -> torch.Tensor:
        """The blocks' states at each row's first position: (B, H)."""
        raise NotImplementedError

    def attend_first(self, kernels: Kernels, qkv: torch.Tensor, num_heads: int, p: float,
                     dropout: torch.nn.Module, window: int | None = None) -> torch.Tensor:
        """Attention of each row's first position alone, over its row: (B, H)."""
        raise NotImplementedError


def local_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    keys: torch.Tensor | None, window: int, chunk: int,
                    groups: torch.Tensor | None = None, written: bool = False) -> torch.Tensor:
    """Attention of each query (B, nh, T, hs) over the keys at most ``window`` positions away
    (and real: ``keys`` (B, T) bool, None: all; and of its own sequence in a packed row:
    ``groups`` (B, T) its sequence ids, 0 at padding), computed on blocks of ``chunk``
    queries against their ``chunk + 2·window`` keys instead of the whole T x T matrix: what
    a ModernBERT local block attends, at (chunk + 2·window) / T of the dense cost. Each query
    also sees itself (a padding row is never empty). No dropout on the probabilities.
    ``written``: the blocks attend written out (:func:`written_attention`), else SDPA."""
    B, nh, T, hs = q.shape
    w, c = window, chunk
    n = -(-T // c)
    extra = n * c - T
    span = c + 2 * w
    qc = F.pad(q, (0, 0, 0, extra)).view(B, nh, n, c, hs)
    kc = F.pad(k, (0, 0, w, extra + w)).unfold(2, span, c).transpose(-1, -2)  # (.., n, span, hs)
    vc = F.pad(v, (0, 0, w, extra + w)).unfold(2, span, c).transpose(-1, -2)
    a = torch.arange(c, device=q.device)[:, None]
    b = torch.arange(span, device=q.device)[None, :]
    near = (a - b + w).abs() <= w  # (c, span): the same in every block
    key_at = torch.arange(n, device=q.device)[:, None] * c - w + b  # (n, span)
    valid = (key_at >= 0) & (key_at < T)  # (n, span)
    if keys is not None:
        valid = valid & F.pad(keys, (w, extra + w)).unfold(1, span, c)  # (B, n, span)
    mask = near & valid[..., None, :]  # (B or 1, n, c, span)
    if groups is not None:  # keys of the query's own sequence, real ones (ids > 0)
        g = F.pad(groups, (w, extra + w)).unfold(1, span, c)  # (B, n, span)
        own = F.pad(groups, (0, extra)).view(-1, n, c)  # (B, n, c)
        mask = mask & (g[..., None, :] == own[..., None]) & (g[..., None, :] > 0)
    mask = mask | (b == a + w)
    mask = mask[:, None] if mask.dim() == 4 else mask
    out = (written_attention(qc, kc, vc, mask, torch.nn.Identity()) if written
           else F.scaled_dot_product_attention(qc, kc, vc, attn_mask=mask))
    return out.reshape(B, nh, n * c, hs)[:, :, :T]


def band(mask: torch.Tensor | None, T: int, window: int | None, device: torch.device,
         queries: int | None = None) -> torch.Tensor | None:
    """``mask`` (B, 1, 1, T) restricted to keys at most ``window`` positions from each of the
    first ``queries`` (default: all T) queries: (B, 1, queries, T), or (queries, T) without a
    mask; ``mask`` itself where ``window`` is None. A query always sees itself, so a padding
    position's row is never empty (no NaN from it)."""
    if window is None:
        return mask
    i = torch.arange(T, device=device)
    offset = i[:T if queries is None else queries, None] - i[None, :]
    near = offset.abs() <= window  # (T, T)
    return near if mask is None else (mask & near) | (offset == 0)


def sequence_positions(groups: torch.Tensor) -> torch.Tensor:
    """(B, T) each token's place in its sequence, from packed rows' sequence ids ``groups``."""
    T = groups.shape[1]
    i = torch.arange(T, device=groups.device).expand_as(groups)
    new = torch.ones_like(groups, dtype=torch.bool)
    new[:, 1:] = groups[:, 1:] != groups[:, :-1]
    return i - torch.where(new, i, 0).cummax(1).values


def sequence_mask(groups: torch.Tensor) -> torch.Tensor:
    """(B, 1, T, T) bool: the keys each query attends in packed rows, the real ones of its own
    sequence (and itself: a padding position's row is never empty)."""
    T = groups.shape[1]
    same = (groups[:, :, None] == groups[:, None, :]) & (groups[:, None, :] > 0)
    return (same | torch.eye(T, dtype=torch.bool, device=groups.device))[:, None]


def _heads(qkv: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Fused projections (B, T, 3H) -> q, k, v stacked: (3, B, nh, T, hs)."""
    B, T, three_h = qkv.shape
    return qkv.view(B, T, 3, num_heads, three_h // 3 // num_heads).permute(2, 0, 3, 1, 4)


@dataclass(frozen=True)
class Padded(Layout):
    """Every position computed; ``mask`` (B, 1, 1, T) bool marks the keys to attend, None:
    every one (no padding: SDPA without a mask, FlashAttention's case on a GPU).

    ``shape`` (B, T): the blocks run on the B·T positions as rows, (B·T, H), which saves each
    linear layer's two reshapes in the backward (bitwise the same arithmetic: a linear layer
    folds (B, T, H) to those rows anyway); None: on (B, T, H) as given."""

    mask: torch.Tensor | None
    shape: tuple[int, int] | None = None
    at: torch.Tensor | None = None  # packed rows: (B, T) each token's place in its sequence
    groups: torch.Tensor | None = None  # packed rows: (B, T) sequence ids, 0 at padding

    def tokens(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.shape is None else x.flatten(0, 1)

    def repad(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.shape is None else x.view(*self.shape, *x.shape[1:])

    def attend(self, kernels: Kernels, qkv: torch.Tensor, num_heads: int, p: float,
               dropout: torch.nn.Module, window: int | None = None) -> torch.Tensor:
        """Fused projections (B, T, 3H) -> attention (B, T, H), or (B·T, 3H) -> (B·T, H)."""
        q, k, v = _heads(self.repad(qkv), num_heads)
        T = q.shape[2]
        if window is not None and p == 0 and 8 * window <= T:  # blocks: where that pays
            keys = None if self.mask is None or self.groups is not None else self.mask[:, 0, 0]
            a = local_attention(q, k, v, keys, window, 2 * window, self.groups,
                                kernels.writes(q, k, v, p, dropout, keys=4 * window))
        else:
            a = kernels.attention(q, k, v, band(self.mask, T, window, q.device), p, dropout)
        return a.transpose(1, 2).reshape(*qkv.shape[:-1], qkv.shape[-1] // 3)

    def positions(self, x: torch.Tensor) -> torch.Tensor:
        """(T,) for (B, T, ...) tokens; (B·T,) for the rows of a (B, T) batch; each token's
        place in its sequence in packed rows ((B, T) or (B·T,))."""
        if self.at is not None:
            return self.at if self.shape is None else self.at.reshape(-1)
        if self.shape is None:
            return torch.arange(x.shape[1], device=x.device)
        B, T = self.shape
        return torch.arange(T, device=x.device).repeat(B)

    def row_positions(self) -> torch.Tensor | None:
        return self.at

    def reads_first(self) -> bool:
        """A packed row's first position is its first sequence's alone."""
        return self.groups is None

    def first(self, x: torch.Tensor) -> torch.Tensor:
        return self.repad(x)[:, 0]

    def attend_first(self, kernels: Kernels, qkv: torch.Tensor, num_heads: int, p: float,
                     dropout: torch.nn.Module, window: int | None = None) -> torch.Tensor:
        """Fused projections (B, T, 3H) or (B·T, 3H) -> the first position's attention (B, H)."""
        qkv = self.repad(qkv)
        q, k, v = _heads(qkv, num_heads)
        mask = band(self.mask, q.shape[2], window, q.device, queries=1)
        a = kernels.attention(q[:, :, :1], k, v, mask, p, dropout)  # (B, nh, 1, hs)
        return a.reshape(len(qkv), -1)


@dataclass(frozen=True)
class Unpadded(Layout):
    """Only the N real tokens computed (ModernBERT's and MosaicBERT's unpadding): rows packed
    after the embeddings, attention over each sequence, repadded (zeros) for the heads.
    Attention runs FlashAttention's variable-length kernel where :attr:`Kernels.varlen` and
    the inputs allow it (16-bit, no attention dropout), else over the repadded rows with the
    mask: the projections and the feed-forward layers, most of a step, cost N rows, not B·T."""

    index: torch.Tensor  # (N,) the real tokens' positions in the flattened (B·T) batch
    cu_seqlens: torch.Tensor  # (B + 1,) int32, where each sequence starts among the N
    max_len: int
    shape: tuple[int, int]  # (B, T)
    padded: Padded  # the same batch padded, with its mask: the fallback's attention
    starts_real: bool = True  # every row's first position is a real token
    at: torch.Tensor | None = None  # packed rows: (N,) each token's place in its sequence

    @staticmethod
    def of(mask: torch.Tensor) -> Unpadded:
        """The layout of a (B, T) bool mask. It reads the device once (a sync on a GPU): the
        real tokens' count, the longest row and whether every row starts with a real token,
        together. The positions come from a stable sort that puts real tokens first, in
        order, where ``nonzero`` would read the device again for its output's size."""
        B, T = mask.shape
        lengths = mask.sum(1, dtype=torch.int32)
        n, max_len, starts_real = torch.stack(
            [lengths.sum(), lengths.max().long(), mask[:, 0].all().long()]).tolist()
        index = (torch.arange(n, device=mask.device) if n == B * T  # no padding: no sort
                 else torch.argsort((~mask.reshape(-1)).to(torch.uint8), stable=True)[:n])
        return Unpadded(index, F.pad(lengths.cumsum(0, dtype=torch.int32), (1, 0)), max_len,
                        (B, T), Padded(mask[:, None, None, :]), bool(starts_real))

    @staticmethod
    def packed(groups: torch.Tensor, padded: Padded) -> Unpadded:
        """The layout of packed rows, ``groups`` (B, T) each token's sequence id (1, 2, ... in
        a row, 0 at padding): the real tokens, one varlen sequence per packed sequence, each
        token at its place in its sequence (``padded``: the same rows with their block mask)."""
        layout = Unpadded.of(groups > 0)
        B, T = groups.shape
        flat = groups.reshape(-1).index_select(0, layout.index)
        row = layout.index // T
        new = torch.ones_like(flat, dtype=torch.bool)
        new[1:] = (flat[1:] != flat[:-1]) | (row[1:] != row[:-1])
        starts = new.nonzero().squeeze(1)
        cu = torch.cat([starts, starts.new_tensor([len(flat)])]).to(torch.int32)
        assert padded.at is not None
        return Unpadded(layout.index, cu, int((cu[1:] - cu[:-1]).max()), (B, T), padded,
                        False, padded.at.reshape(-1).index_select(0, layout.index))

    def tokens(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, ...) -> (N, ...)."""
        return x.flatten(0, 1).index_select(0, self.index)

    def repad(self, x: torch.Tensor) -> torch.Tensor:
        """(N, ...) -> (B, T, ...), zeros at the padding."""
        B, T = self.shape
        out = x.new_zeros(B * T, *x.shape[1:]).index_copy(0, self.index, x)
        return out.view(B, T, *x.shape[1:])

    def attend(self, kernels: Kernels, qkv: torch.Tensor, num_heads: int, p: float,
               dropout: torch.nn.Module, window: int | None = None) -> torch.Tensor:
        """Fused projections (N, 3H) -> attention (N, H)."""
        N, three_h = qkv.shape
        varlen = _varlen_attn() if kernels.varlen and p == 0 and window is None else None
        if varlen is None or qkv.dtype not in (torch.float16, torch.bfloat16):
            return self.tokens(self.padded.attend(kernels, self.repad(qkv), num_heads, p,
                                                  dropout, window))
        q, k, v = qkv.view(N, 3, num_heads, three_h // 3 // num_heads).unbind(1)
        a = varlen(q, k, v, self.cu_seqlens, self.cu_seqlens, self.max_len, self.max_len)
        return a.reshape(N, three_h // 3)

    def positions(self, x: torch.Tensor) -> torch.Tensor:
        """(N,): each real token's position in its row (in its sequence, packed)."""
        return self.index % self.shape[1] if self.at is None else self.at

    def row_positions(self) -> torch.Tensor | None:
        return self.padded.at

    def reads_first(self) -> bool:
        """Each row's first position is among the real tokens (a [CLS]; read with the rest
        of the layout, by :meth:`of`)."""
        return self.starts_real

    def first(self, x: torch.Tensor) -> torch.Tensor:
        """(N, H) -> (B, H): each sequence's first token (rows begin with a real token)."""
        return x.index_select(0, self.cu_seqlens[:-1])

    def attend_first(self, kernels: Kernels, qkv: torch.Tensor, num_heads: int, p: float,
                     dropout: torch.nn.Module, window: int | None = None) -> torch.Tensor:
        """Fused projections (N, 3H) -> the first tokens' attention (B, H), over the repadded
        rows with the mask (one query a row: the varlen kernel would save nothing)."""
        return self.padded.attend_first(kernels, self.repad(qkv), num_heads, p, dropout,
                                        window)


@dataclass(frozen=True)
class HostLayout:
    """What :class:`Unpadded` reads off the device, computed on the host from a batch's host
    tensors (before they go over), so that a step reads nothing back: the real tokens'
    positions in the flattened (B·T) batch, where each sequence starts among them, the
    longest sequence, whether every row starts with a real token, and in packed rows each
    token's place in its sequence. The same values :meth:`Unpadded.of` and
    :meth:`Unpadded.packed` compute on the device (tests/model/test_unpadding.py).
    :meth:`to` moves the tensors (asynchronously from pinned memory); the numbers stay on the
    host."""

    index: torch.Tensor  # (N,) int64
    cu_seqlens: torch.Tensor  # (S + 1,) int32: S sequences (B, or the packed ones)
    max_len: int
    shape: tuple[int, int]
    starts_real: bool
    at: torch.Tensor | None = None  # packed rows: (N,) int64

    @staticmethod
    def of(attention_mask: torch.Tensor, sequence_ids: torch.Tensor | None = None
           ) -> HostLayout:
        """The layout of host (B, T) rows: ``attention_mask`` (1/True on real tokens), or
        ``sequence_ids`` (packed rows: 1, 2, ... a row, 0 at padding; the mask is theirs)."""
        import numpy as np

        groups = None if sequence_ids is None else sequence_ids.numpy()
        real = (groups > 0) if groups is not None else attention_mask.numpy().astype(bool)
        B, T = real.shape
        index = np.flatnonzero(real.reshape(-1))
        if groups is None:
            lengths = real.sum(1)
            cu = np.concatenate([[0], lengths.cumsum()])
            at = None
        else:
            flat, row = groups.reshape(-1)[index], index // T
            new = np.ones(len(flat), dtype=bool)
            new[1:] = (flat[1:] != flat[:-1]) | (row[1:] != row[:-1])
            starts = np.flatnonzero(new)
            cu = np.concatenate([starts, [len(flat)]])
            lengths = np.diff(cu)
            i = np.arange(T)[None, :].repeat(B, 0)
            first = np.ones_like(groups, dtype=bool)
            first[:, 1:] = groups[:, 1:] != groups[:, :-1]
            at = torch.from_numpy((i - np.maximum.accumulate(np.where(first, i, 0), 1))
                                  .reshape(-1)[index].astype(np.int64))
        return HostLayout(torch.from_numpy(index.astype(np.int64)),
                          torch.from_numpy(cu.astype(np.int32)),
                          int(lengths.max()) if len(lengths) else 0, (B, T),
                          groups is None and bool(real[:, 0].all()), at)

    def to(self, device: torch.device, pin: bool = False) -> HostLayout:
        """The tensors on ``device`` (from pinned memory where ``pin``: the copies overlap)."""
        def move(t: torch.Tensor | None) -> torch.Tensor | None:
            if t is None:
                return None
            return (t.pin_memory() if pin else t).to(device, non_blocking=pin)

        return dataclasses.replace(self, index=move(self.index), cu_seqlens=move(
            self.cu_seqlens), at=move(self.at))


@dataclass(frozen=True)
class Kernels:
    """How the model drops out and attends. ``written_attention``: attention with dropout in
    training, and short rows' without (:meth:`writes`), runs :func:`written_attention` with
    the block's own dropout (else SDPA).
    ``unpad``: a padded batch computes only its real tokens (:class:`Unpadded`); ``varlen``:
    their attention may run FlashAttention's variable-length kernel; ``vocab_multiple``: the
    width the generator's output layer is padded to in training (1: none)."""

    name: str
    dropout: Callable[[torch.Tensor, float], torch.Tensor]  # training-mode dropout of x at p
    written_attention: bool
    unpad: bool = True
    varlen: bool = False
    vocab_multiple: int = 1

    def layout(self, attention_mask: torch.Tensor | None,
               shape: tuple[int, int] | None = None,
               sequence_ids: torch.Tensor | None = None,
               host: HostLayout | None = None) -> Layout:
        """The layout of a batch with this (B, T) mask (1/True on real tokens; None: no
        padding); ``shape`` (B, T): a padded layout runs the blocks on rows (:class:`Padded`).
        ``sequence_ids`` (B, T): packed rows (1, 2, ... for each sequence side by side in a
        row, 0 at padding; the mask is then theirs), each token attending within its own
        sequence and placed in it from 0. ``host``: the same batch's :class:`HostLayout`
        (on this device): unpadding then reads nothing back from the device."""
        if sequence_ids is not None:
            at = sequence_positions(sequence_ids)
            padded = Padded(sequence_mask(sequence_ids), None, at, sequence_ids)
            if self.unpad and host is not None:
                return Unpadded(host.index, host.cu_seqlens, host.max_len, host.shape, padded,
                                False, host.at)
            if self.unpad:
                return Unpadded.packed(sequence_ids, padded)
            return dataclasses.replace(padded, shape=shape)
        if attention_mask is None:
            return Padded(None, shape)
        mask = attention_mask.bool()
        if not self.unpad or (host is None and torch.compiler.is_compiling()):
            # A compiled step (train.compile) keeps the rows: finding the real tokens on the
            # device is a data-dependent shape, a graph break (bench/host_cost.py)
            return Padded(mask[:, None, None, :], shape)
        if host is not None:  # read on the host: no sync
            if len(host.index) == mask.numel():
                return Padded(None, shape)
            return Unpadded(host.index, host.cu_seqlens, host.max_len, host.shape,
                            Padded(mask[:, None, None, :]), host.starts_real)
        unpadded = Unpadded.of(mask)  # the layout's one read of the device
        if len(unpadded.index) == mask.numel():  # no padding: attention without a mask
            return Padded(None, shape)  # (FlashAttention on a GPU)
        return unpadded

    def attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  attn_mask: torch.Tensor | None, p: float,
                  dropout: torch.nn.Module | None) -> torch.Tensor:
        """Attention (B, nh, T, hs) with dropout ``p`` on the probabilities (0: none;
        ``dropout`` may then be None)."""
        if self.writes(q, k, v, p, dropout):
            return written_attention(q, k, v, attn_mask, _module(dropout))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=p)

    def writes(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, p: float,
               dropout: torch.nn.Module | None, keys: int | None = None) -> bool:
        """Whether :meth:`attention` runs :func:`written_attention`: with dropout on the
        probabilities; without, in training (``dropout``'s mode; a body without dropout
        passes None) where a backward follows and the rows are short (:func:`writes_short`
        of ``keys``, default ``k``'s length; a local block's blocks: their keys), in eager
        mode (a compiled step keeps SDPA's kernel)."""
        if not self.written_attention:
            return False
        return p > 0 or (getattr(dropout, "training", True) and torch.is_grad_enabled()
                         and writes_short(q.dtype, k.shape[-2] if keys is None else keys)
                         and (q.requires_grad or k.requires_grad or v.requires_grad)
                         and not torch.compiler.is_compiling())

    def biased_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                         bias: torch.Tensor, scale: float, p: float,
                         dropout: torch.nn.Module | None) -> torch.Tensor:
        """Attention (B, nh, T, hs) of ``q k^T * scale + bias`` (an additive float bias,
        the padding folded in), dropout ``p`` on the probabilities as :meth:`attention`."""
        if self.writes(q, k, v, p, dropout):
            return written_attention(q, k, v, None, _module(dropout), bias, scale)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=p,
                                              scale=scale)


def _module(dropout: torch.nn.Module | None) -> torch.nn.Module:
    return torch.nn.Identity() if dropout is None else dropout


WRITTEN_KEYS = {torch.bfloat16: 256, torch.float16: 256, torch.float32: 128}


def writes_short(dtype: torch.dtype, keys: int) -> bool:
    """Whether attention over ``keys`` keys a row is written out in training without dropout
    (``FAST_CPU``): up to :data:`WRITTEN_KEYS` keys, where SDPA's CPU kernel's backward is the
    slower (forward and backward of 4 heads of 64 over 16,384 tokens, 2-core Intel Xeon AMX,
    medians: bf16 at 64, 128, 256, 512 keys written 34.0, 49.1, 67.9, 124.0 ms against SDPA's
    108.3, 114.0, 85.5, 111.5; fp32 33.4, 51.5, 89.5, 182.1 against 40.3, 63.7, 88.6, 156.6;
    ``bench/attention_paths.py``). A forward alone (evaluation) runs SDPA, faster there."""
    return keys <= WRITTEN_KEYS.get(dtype, 0)


KEPT_BYTES = 9  # per probability: the fp32 softmax, its keep mask, the dropped product's input
KEPT_BYTES_UNDROPPED = 6  # without dropout: the fp32 softmax and the product's 16-bit input


def kept_attention_bytes(kernels: Kernels, rows: int, seq_len: int, layers: int, heads: int,
                         p: float) -> int:
    """Bytes of attention probabilities a training step of ``rows`` rows keeps for its
    backward in ``layers`` blocks of ``heads`` heads: the written attention (dropout ``p`` > 0
    on a path that writes it out, or short rows: :func:`writes_short`) keeps every row's whole
    T x T matrix, about :data:`KEPT_BYTES` bytes a probability (:data:`KEPT_BYTES_UNDROPPED`
    without dropout); SDPA's fused kernels keep none of that size."""
    if not kernels.written_attention:
        return 0
    if p > 0:
        return layers * rows * heads * seq_len * seq_len * KEPT_BYTES
    if writes_short(torch.bfloat16, seq_len):  # the longer of the dtypes' limits
        return layers * rows * heads * seq_len * seq_len * KEPT_BYTES_UNDROPPED
    return 0


FAST_CPU = Kernels("fast-cpu", lane_dropout, written_attention=True)
REFERENCE = Kernels("reference", torch_dropout, written_attention=False, varlen=True,
                    vocab_multiple=64)
KERNELS = {k.name: k for k in (FAST_CPU, REFERENCE)}


def kernels_for(device: torch.device | str) -> Kernels:
    """The entry for ``device``: the fast CPU path on a CPU, torch's own elsewhere."""
    return FAST_CPU if torch.device(device).type == "cpu" else REFERENCE


def use(module: torch.nn.Module, kernels: Kernels) -> None:
    """Switch a built model to other kernels (an ablation timing both on one model; a model
    is otherwise built with its kernels)."""
    for m in module.modules():
        if isinstance(getattr(m, "kernels", None), Kernels):
            m.kernels = kernels
