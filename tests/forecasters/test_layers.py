"""Attention kernels against plain softmax attention, the log-sparse pattern, XL's segmentation."""

from __future__ import annotations

import math

import pytest
import torch

from recurbench.forecasters.layers import attention as attention_module
from recurbench.forecasters.layers.attention import (
    AttentionLayer,
    FullAttention,
    MaskedAttention,
    ProbSparseAttention,
    log_sparse_pattern,
    sampled_scores,
)
from recurbench.forecasters.layers.embedding import sinusoid_table
from recurbench.forecasters.layers.rsa import REMHeadConfig, RSAFullAttention, RSAMixer
from recurbench.forecasters.models.transformer_xl import RelativeAttentionLayer, segment_bounds
from recurbench.kernels.rem import rem_apply


def softmax_attention(q, k, v, causal=False):
    """Independent reference: explicit scores, [B, T, H, D] layout."""
    scores = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(q.shape[-1])
    if causal:
        Tq, Tk = scores.shape[-2:]
        scores = scores.masked_fill(torch.ones(Tq, Tk, dtype=torch.bool).triu(1), float("-inf"))
    return torch.einsum("bhij,bjhd->bihd", scores.softmax(-1), v)


@pytest.mark.parametrize("causal", [False, True])
def test_probsparse_with_every_query_active_is_softmax_attention(causal):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 12, 3, 4, dtype=torch.float64) for _ in range(3))
    # factor * ceil(ln 12) = 30 >= 12: every query is "active", so nothing is approximated.
    out = ProbSparseAttention(factor=10, causal=causal)(q, k, v)
    torch.testing.assert_close(out, softmax_attention(q, k, v, causal))


def informer_probsparse(q, k, v, factor, causal, rem=None, gate=None):
    """Informer's ProbSparse written out as its reference does it (sampled keys gathered, the
    measure and top-u selection on them), [B, T, H, D] layout; draws the same key sample. With a dense
    ``rem`` ``[H, Lq, Lk]`` and ``gate``, each active row i is ``(1 - gate) softmax + gate rem[h, i]``
    times V (RSA mixed into the attention matrix of the active queries); lazy rows stay unmixed."""
    B, Lq, H, D = q.shape
    Lk = k.shape[1]
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    n_sample = min(factor * math.ceil(math.log(Lk)), Lk)
    n_top = min(factor * math.ceil(math.log(Lq)), Lq)
    sample = torch.randint(Lk, (Lq, n_sample))
    k_sample = k[:, :, sample, :]  # [B, H, Lq, n_sample, D]
    s_sample = (q[:, :, :, None, :] * k_sample).sum(-1)
    top = (s_sample.max(-1).values - s_sample.sum(-1) / Lk).topk(n_top, dim=-1).indices
    out = v.cumsum(-2) if causal else v.mean(-2, keepdim=True).expand(B, H, Lq, D).clone()
    for b in range(B):
        for h in range(H):
            for i in top[b, h].tolist():
                scores = (k[b, h] @ q[b, h, i]) / math.sqrt(D)
                if causal:
                    scores = scores.masked_fill(torch.arange(Lk) > i, float("-inf"))
                weights = scores.softmax(-1)
                if rem is not None:
                    weights = (1 - gate) * weights + gate * rem[h, i]
                out[b, h, i] = weights @ v[b, h]
    return out.transpose(1, 2)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("length", "head_dim"), [(40, 8), (40, 2)])  # score-matrix path; gathered-keys path
def test_probsparse_matches_informers_sampled_measure_values_and_gradients(causal, length, head_dim):
    # factor 1: n_sample = n_top = ceil(ln 40) = 4 of 40 queries active. head_dim 2 makes Lk > n_sample * D,
    # the gathered-keys branch of sampled_scores.
    inputs = [torch.randn(2, length, 3, head_dim, dtype=torch.float64, requires_grad=True) for _ in range(3)]
    torch.manual_seed(5)
    out = ProbSparseAttention(factor=1, causal=causal)(*inputs)
    grads = torch.autograd.grad((out * out.detach().sin()).sum(), inputs)
    torch.manual_seed(5)
    ref = informer_probsparse(*inputs, factor=1, causal=causal)
    ref_grads = torch.autograd.grad((ref * ref.detach().sin()).sum(), inputs)
    torch.testing.assert_close(out, ref)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r)


@pytest.mark.parametrize("causal", [False, True])
def test_probsparse_mixing_rems_into_active_rows_only_matches_the_written_out_reference(causal):
    # RSASpec.prob_rows = "active": the REM rows at the active queries' own positions (not the first u
    # rows) join their softmax weights; the lazy queries keep mean(V) / cumsum(V). Values and gradients
    # (also of the gate and the REM parameters) against the dense construction.
    from recurbench.forecasters.layers.rsa import REMHeadConfig, RSAMixer
    from recurbench.kernels.rem import rem_matrices

    inputs = [torch.randn(2, 30, 4, 3, dtype=torch.float64, requires_grad=True) for _ in range(3)]
    heads = REMHeadConfig(k=(1, 1, 1, 1, 0, 0), dilations=(3,))
    mixer = RSAMixer(4, heads, masked=causal, gate_init=0.3).double()
    params = [mixer.mu, mixer.eta, mixer.nu, mixer.theta]
    torch.manual_seed(5)
    out = ProbSparseAttention(factor=1, causal=causal, mixes_active_rows=True)(*inputs, mixer=mixer)
    grads = torch.autograd.grad((out * out.detach().sin()).sum(), inputs + params)
    rem = rem_matrices(30, masked=causal, dtype=torch.float64, **{k: v for k, v in mixer._rem_kwargs().items()
                                                                  if k != "masked"})
    torch.manual_seed(5)
    ref = informer_probsparse(*inputs, factor=1, causal=causal, rem=rem, gate=mixer.gate())
    ref_grads = torch.autograd.grad((ref * ref.detach().sin()).sum(), inputs + params)
    torch.testing.assert_close(out, ref)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r)
    # Lazy rows are the baseline's: with the same draws, ProbSparse alone differs in the active rows only.
    torch.manual_seed(5)
    base = ProbSparseAttention(factor=1, causal=causal)(*inputs)
    changed = (out - base).abs().amax(-1) > 1e-9  # [B, T, H]
    assert changed.sum(1).tolist() == [[math.ceil(math.log(30))] * 4] * 2  # u = 4 rows per batch and head


@pytest.mark.parametrize("n_keys", [12, 13, 40])  # S * D = 12: both branches
def test_sampled_scores_are_the_sampled_dot_products(n_keys):
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 3, 7, 4, generator=gen), torch.randn(2, 3, n_keys, 4, generator=gen)
    sample = torch.randint(n_keys, (7, 3), generator=gen)
    expected = torch.stack([torch.stack([(q[..., i, :] * k[..., sample[i, j], :]).sum(-1) for j in range(3)], -1)
                            for i in range(7)], -2)
    torch.testing.assert_close(sampled_scores(q, k, sample), expected)


def test_probsparse_lazy_queries_get_mean_or_cumsum_of_values():
    torch.manual_seed(0)
    q = torch.zeros(1, 40, 1, 4)  # all-zero queries: uniform scores, sparsity measure zero everywhere
    k, v = torch.randn(1, 40, 1, 4), torch.randn(1, 40, 1, 4)
    out = ProbSparseAttention(factor=1, causal=False)(q, k, v)
    # Active queries with uniform scores also give mean(V): every row is mean(V).
    torch.testing.assert_close(out, v.mean(1, keepdim=True).expand_as(out))
    out = ProbSparseAttention(factor=1, causal=True)(q, k, v)
    u = math.ceil(math.log(40))
    cumsum = v.cumsum(1)
    lazy_rows = [i for i in range(40) if torch.allclose(out[0, i], cumsum[0, i])]
    assert len(lazy_rows) >= 40 - u  # Informer's quirk: lazy decoder queries get the cumulative *sum*


def test_full_attention_matches_reference():
    torch.manual_seed(1)
    q, k, v = (torch.randn(2, 7, 2, 5) for _ in range(3))
    torch.testing.assert_close(FullAttention(causal=True)(q, k, v), softmax_attention(q, k, v, True), atol=1e-5, rtol=1e-5)


def _layer_output_and_grads(layer, *inputs, **kwargs):
    """The layer's output on ``inputs`` and every parameter's gradient of its summed squares."""
    layer.zero_grad()
    out = layer(*inputs, **kwargs)
    out.square().sum().backward()
    return [out.detach(), *(p.grad.clone() for p in layer.parameters())]


def _outputs_and_grads(fn, leaves, cot):
    leaves = [t.detach().requires_grad_() for t in leaves]
    out = fn(*leaves)
    return [out, *torch.autograd.grad(out, leaves, cot)]


@pytest.mark.parametrize(
    "attention, n_queries",
    [(FullAttention(), 9), (FullAttention(causal=True), 9), (FullAttention(causal=True), 6),
     (MaskedAttention(log_sparse_pattern(local_window=2)), 9)],
    ids=["full", "causal", "cross", "logsparse"],
)
def test_cpu_matrix_products_equal_sdpa(monkeypatch, attention, n_queries):
    """Short key sequences on a CPU take the materialised-weights path; SDPA (above MATH_MAX_KEYS) gives
    the same values and gradients (fp64), causal masking only when square, LogSparse's pattern too."""
    monkeypatch.setattr(attention_module, "MATH_MIN_HEAD_DIM", 1)  # these heads of 4 take the products
    g = torch.Generator().manual_seed(4)
    q = torch.randn(2, n_queries, 3, 4, dtype=torch.float64, generator=g)
    k, v = (torch.randn(2, 9, 3, 4, dtype=torch.float64, generator=g) for _ in range(2))
    cot = torch.randn(2, n_queries, 3, 4, dtype=torch.float64, generator=g)
    products = _outputs_and_grads(attention, (q, k, v), cot)
    monkeypatch.setattr(attention_module, "MATH_MAX_KEYS", 0)
    sdpa = _outputs_and_grads(attention, (q, k, v), cot)
    for name, a, b in zip(["out", "dq", "dk", "dv"], products, sdpa, strict=True):
        torch.testing.assert_close(a, b, msg=lambda m, n=name: f"{n}: {m}")


def test_which_attention_path_a_cpu_takes():
    """Wide heads materialise up to MATH_MAX_KEYS keys; narrow heads go through SDPA, unless an RSA mixer
    mixes into the weights over at most SMALL_HEAD_RSA_MAX_KEYS keys; other devices never materialise."""
    wide, narrow = torch.zeros(1, 1, 1, attention_module.MATH_MIN_HEAD_DIM), torch.zeros(1, 1, 1, 4)
    path = attention_module.materialises_weights
    assert path(wide, attention_module.MATH_MAX_KEYS, mixes_weights=False)
    assert not path(wide, attention_module.MATH_MAX_KEYS + 1, mixes_weights=True)
    assert not path(narrow, 8, mixes_weights=False)
    assert path(narrow, attention_module.SMALL_HEAD_RSA_MAX_KEYS, mixes_weights=True)
    assert not path(narrow, attention_module.SMALL_HEAD_RSA_MAX_KEYS + 1, mixes_weights=True)
    assert not path(torch.zeros(1, 1, 1, 64, device="meta"), 8, mixes_weights=True)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("cross", [False, True])
def test_rsa_mixing_into_weights_equals_mixing_outputs(monkeypatch, causal, cross):
    """RSA eq. 4 mixed into the materialised weights (CPU, short keys) and into SDPA's output give the
    same layer output and the same gradients for every parameter, gate and REM parameters included."""
    heads = REMHeadConfig.from_table5("(1,1,1,1,1,1)", "[2,3,5]", allow_unpaired=True)
    torch.manual_seed(0)
    layer = RSAFullAttention(24, 6, heads, causal=causal, gate_init=0.4).double()
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 14 if cross else 11, 24, dtype=torch.float64, generator=g)
    context = torch.randn(2, 11, 24, dtype=torch.float64, generator=g) if cross else None
    positions = range(7, 21) if cross else None
    calls = []
    original = layer.mixer.mix_weights
    monkeypatch.setattr(layer.mixer, "mix_weights", lambda *a, **kw: calls.append(1) or original(*a, **kw))

    def run():
        return _layer_output_and_grads(layer, x, context, query_positions=positions)

    via_weights = run()
    assert calls, "the CPU's short-sequence path mixes into the weights"
    monkeypatch.setattr(attention_module, "MATH_MAX_KEYS", 0)
    calls.clear()
    via_outputs = run()
    assert not calls
    names = ["out", *(n for n, _ in layer.named_parameters())]
    for name, a, b in zip(names, via_weights, via_outputs, strict=True):
        torch.testing.assert_close(a, b, msg=lambda m, n=name: f"{n}: {m}")


def test_rsa_mixing_into_dropped_out_weights_in_training():
    """With attention dropout in training, the REMs are mixed into the dropped-out softmax weights:
    the same as mixing them into the output of attention with those weights (same dropout mask)."""
    torch.manual_seed(0)
    layer = RSAFullAttention(16, 4, REMHeadConfig(k=(2, 1, 1, 0, 0, 0)), gate_init=0.2).double()
    layer.attention.dropout = 0.3
    x = torch.randn(2, 10, 16, dtype=torch.float64)
    torch.manual_seed(7)
    out = layer.train()(x)
    q, k, v = (proj(x).view(2, 10, 4, 4) for proj in (layer.q_proj, layer.k_proj, layer.v_proj))
    scores = torch.einsum("bihd,bjhd->bhij", q, k) / 2.0
    torch.manual_seed(7)
    dropped = torch.nn.functional.dropout(scores.softmax(-1), 0.3)
    assert (dropped == 0).any()
    m = layer.mixer
    pv = rem_apply(v, kind=m.kinds, eta=m._per_head(m.eta, m.reg_index), nu=m._per_head(m.nu, m.cyc_index),
                   theta=m._per_head(m.theta, m.cyc_index), dilation=m.dilations, masked=False, impl="naive")
    want = torch.lerp(torch.einsum("bhij,bjhd->bihd", dropped, v), pv, m.gate())
    torch.testing.assert_close(out, layer.out_proj(want.reshape(2, 10, 16)))


def test_xl_rsa_mixing_into_weights_equals_mixing_outputs():
    """Transformer-XL's attention mixes the REMs into its weights over [memory; segment]; a mixer forced
    onto an explicit REM implementation mixes the outputs instead: same values and gradients."""
    heads = REMHeadConfig.from_table5("(2,1,1,0,1,1)", "[3,3]")
    torch.manual_seed(1)
    layer = RelativeAttentionLayer(24, 6, 0.0, relative=True, mixer=RSAMixer(6, heads, masked=True)).double()
    g = torch.Generator().manual_seed(6)
    memory, h = torch.randn(2, 5, 24, dtype=torch.float64, generator=g), torch.randn(2, 7, 24, dtype=torch.float64, generator=g)

    def run():
        return _layer_output_and_grads(layer, h, memory)

    assert layer.mixer.mixes_weights(range(5, 12))
    via_weights = run()
    layer.mixer.impl = "naive"
    assert not layer.mixer.mixes_weights(range(5, 12))
    via_outputs = run()
    names = ["out", *(n for n, _ in layer.named_parameters())]
    for name, a, b in zip(names, via_weights, via_outputs, strict=True):
        torch.testing.assert_close(a, b, msg=lambda m, n=name: f"{n}: {m}")


class _Labels(torch.nn.Module):
    """An "attention" whose output at (step t, head h) is 1000 h + t in every dimension."""

    def forward(self, q, k, v):
        B, T, H, D = q.shape
        labels = 1000 * torch.arange(H)[None, :] + torch.arange(T)[:, None]
        return labels[None, :, :, None].expand(B, T, H, D).float()


@pytest.mark.parametrize("mix", [False, True])
def test_attention_layer_mix_flattens_heads_as_informers_decoder(mix):
    # Informer2020's decoder self-attention (mix=True): row r holds one head's outputs at H steps in a
    # row -- here L = 4, H = 2, D = 2: rows [h0 t0, h0 t1], [h0 t2, h0 t3], [h1 t0, h1 t1], [h1 t2, h1 t3].
    layer = AttentionLayer(_Labels(), 4, 2, mix=mix)
    with torch.no_grad():
        layer.out_proj.weight.copy_(torch.eye(4))
        layer.out_proj.bias.zero_()
    out = layer(*(torch.zeros(1, 4, 4),) * 3)[0]
    expected = (
        [[0, 0, 1, 1], [2, 2, 3, 3], [1000, 1000, 1001, 1001], [1002, 1002, 1003, 1003]] if mix
        else [[0, 0, 1000, 1000], [1, 1, 1001, 1001], [2, 2, 1002, 1002], [3, 3, 1003, 1003]]
    )
    assert out.tolist() == expected


def test_log_sparse_pattern_lags():
    allowed = log_sparse_pattern()(10, 10, torch.device("cpu"))
    assert torch.nonzero(allowed[9]).flatten().tolist() == [1, 5, 7, 8, 9]  # lags 8, 4, 2, 1, 0
    assert not allowed.triu(1).any()  # causal
    local = log_sparse_pattern(local_window=3)(10, 10, torch.device("cpu"))
    assert torch.nonzero(local[9]).flatten().tolist() == [1, 5, 7, 8, 9]
    assert torch.nonzero(local[6]).flatten().tolist() == [2, 4, 5, 6]


def test_masked_attention_uses_only_allowed_keys():
    torch.manual_seed(2)
    q, k, v = (torch.randn(1, 10, 1, 3) for _ in range(3))
    attention = MaskedAttention(log_sparse_pattern())
    base = attention(q, k, v)
    v2 = v.clone()
    v2[0, 2] += 100.0  # key 2 is not among row 9's (lags 0,1,2,4,8 -> keys 9,8,7,5,1)
    assert torch.allclose(attention(q, k, v2)[0, 9], base[0, 9])
    assert not torch.allclose(attention(q, k, v2)[0, 3], base[0, 3])  # row 3 sees key 2 (lag 1)


def test_segment_bounds_cut_from_the_end():
    assert segment_bounds(72, 24) == [(0, 24), (24, 48), (48, 72)]
    assert segment_bounds(10, 4) == [(0, 2), (2, 6), (6, 10)]


@pytest.mark.parametrize("memory_len", [0, 3])
def test_relative_attention_equals_a_loop_over_query_key_pairs(memory_len):
    """XL's score of query i (key-space position M + i) and key j, written out pair by pair:
    ((q_i + u) . k_j + (q_i + v) . W_r R_{M+i-j}) / sqrt(D), keys after the query masked, softmax, times V."""
    torch.manual_seed(7)
    layer = RelativeAttentionLayer(12, 3, 0.0, relative=True, mixer=None).double().eval()
    h, memory = torch.randn(2, 5, 12, dtype=torch.float64), torch.randn(2, memory_len, 12, dtype=torch.float64)
    B, L, M, H, D = 2, 5, memory_len, 3, 4
    context = torch.cat([memory, h], dim=1)
    q = layer.q_proj(h).view(B, L, H, D)
    k, v = layer.kv_proj(context).view(B, M + L, 2, H, D).unbind(2)
    expected = torch.zeros(B, L, H, D, dtype=torch.float64)
    for b in range(B):
        for hd in range(H):
            for i in range(L):
                scores = []
                for j in range(M + i + 1):
                    r = layer.r_proj(sinusoid_table(torch.tensor([M + i - j]), 12).double())[0].view(H, D)[hd]
                    scores.append(((q[b, i, hd] + layer.u_bias[hd]) @ k[b, j, hd]
                                   + (q[b, i, hd] + layer.v_bias[hd]) @ r) / math.sqrt(D))
                weights = torch.softmax(torch.stack(scores), dim=0)
                expected[b, i, hd] = weights @ v[b, : M + i + 1, hd]
    expected = layer.out_proj(expected.reshape(B, L, 12))
    torch.testing.assert_close(layer(h, memory), expected)


def test_relative_attention_is_causal_over_memory_and_segment():
    torch.manual_seed(3)
    layer = RelativeAttentionLayer(8, 2, 0.0, relative=True, mixer=None).eval()
    memory, h = torch.randn(1, 4, 8), torch.randn(1, 5, 8)
    out = layer(h, memory)
    h2 = h.clone()
    h2[0, 3] += 10.0
    out2 = layer(h2, memory)
    torch.testing.assert_close(out[0, :3], out2[0, :3])  # earlier steps do not see step 3
    assert not torch.allclose(out[0, 3:], out2[0, 3:])
    memory2 = memory.clone()
    memory2[0, 0] += 10.0
    assert not torch.allclose(layer(h, memory2)[0, 0], out[0, 0])  # the memory is attended
