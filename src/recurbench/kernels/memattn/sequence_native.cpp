// The attentive cores' whole-sequence forward and backward with the step loop in C++: the CPU
// training path of recurbench.kernels.memattn.sequence (which states the recurrence and holds the
// Python version of the same loop, the reference of these functions' tests).
//
// Why C++: at batch 10 a step's arithmetic is ~2.5 M multiply-adds, about 50 us on one core, while
// the Python loop spent ~100 us a step in the interpreter and ~45 small operations at 3-6 us each.
// Here the matrix products and the long element-wise passes (tanh, sigmoid) stay ATen calls (MKL and
// ATen's vectorised maths); everything per slot (the screening's bookkeeping, reading keys and values
// by index, the scores, the softmax, the weighted sums and their gradients, the cells' element-wise
// formulas) is a plain loop over contiguous rows, which the compiler vectorises.
//
// Layouts (contiguous): histories [T, B, .]; row n * B + b of a history's [T * B, .] view is state n
// of batch row b; a step's slots are those rows (a window: n = 0 .. t-1; a screened memory: its index
// table, [B, S], S = nu + rho, with unoccupied slots masked).

#include <torch/extension.h>

#include <cmath>
#include <limits>
#include <vector>

namespace {

using at::Tensor;

enum Cell : int64_t { kLSTM = 0, kTanh = 1, kReLU = 2, kModReLU = 3 };

// The screened memory of B rows in lockstep (the Python version: sequence._Screening, whose
// docstring gives the rules). `flat` holds history rows; the occupied slots are the same in every row.
template <typename scalar_t>
struct Screening {
  int64_t B, nu, rho, S;
  std::vector<int64_t> flat;
  std::vector<char> occupied;
  std::vector<scalar_t> scores;

  Screening(int64_t B_, int64_t nu_, int64_t rho_)
      : B(B_), nu(nu_), rho(rho_), S(nu_ + rho_), flat(B_ * (nu_ + rho_), 0), occupied(nu_ + rho_, 0),
        scores(B_ * (nu_ + rho_), 0) {}

  void insert(int64_t n) {
    const int64_t pos = n % nu;
    if (rho > 0 && occupied[pos]) {
      bool relevant_full = true;
      for (int64_t r = 0; r < rho; ++r) relevant_full = relevant_full && occupied[nu + r];
      int64_t first_row_slot = 0;
      for (int64_t b = 0; b < B; ++b) {
        scalar_t* sc = &scores[b * S];
        // the lowest-scoring member (an empty slot counts as -inf), first on ties
        int64_t j = 0;
        scalar_t lowest = std::numeric_limits<scalar_t>::infinity();
        for (int64_t r = 0; r < rho; ++r) {
          const scalar_t m = occupied[nu + r] ? sc[nu + r] : -std::numeric_limits<scalar_t>::infinity();
          if (r == 0 || m < lowest) {
            lowest = m;
            j = r;
          }
        }
        if (b == 0) first_row_slot = j;
        if (sc[pos] > lowest) {  // the evicted state enters the relevant set
          flat[b * S + nu + j] = flat[b * S + pos];
          sc[nu + j] = sc[pos];
        }
      }
      if (!relevant_full) occupied[nu + first_row_slot] = 1;  // the first empty slot, the same in every row
    }
    for (int64_t b = 0; b < B; ++b) {
      flat[b * S + pos] = n * B + b;
      scores[b * S + pos] = 0;
    }
    occupied[pos] = 1;
  }

  // Buffer slots add the attention they received to their relevancy score.
  void attended(const scalar_t* alpha) {
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < nu; ++i) scores[b * S + i] += alpha[b * S + i];
  }
};

// The slots of step t: `n` per row and their history rows (rows[b * n + i]).
int64_t step_slots(int64_t t, int64_t B, bool window, const int64_t* table, std::vector<int64_t>& rows) {
  if (window) {
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < t; ++i) rows[b * t + i] = i * B + b;
    return t;
  }
  const int64_t S = static_cast<int64_t>(rows.size()) / B;
  std::copy(table, table + B * S, rows.begin());
  return S;
}

// z[b, i, :] = tanh(key(rows[b, i]) + q[b, :]) for the n slots of every row: z holds [B, n, A].
template <typename scalar_t>
void keys_plus_query_tanh(Tensor& z, int64_t B, int64_t n, int64_t A, const std::vector<int64_t>& rows,
                          const scalar_t* keys, const scalar_t* q) {
  scalar_t* Z = z.data_ptr<scalar_t>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < n; ++i) {
      scalar_t* zp = Z + (b * n + i) * A;
      const scalar_t* kp = keys + rows[b * n + i] * A;
      const scalar_t* qp = q + b * A;
      for (int64_t a = 0; a < A; ++a) zp[a] = kp[a] + qp[a];
    }
  if (B * n * A == z.numel()) {
    z.tanh_();
  } else {
    z.narrow(0, 0, B * n * A).tanh_();
  }
}

// A dot product in vector lanes (-fopenmp-simd): summed in order, its chain of dependent additions
// would cost ~4 cycles an element, more than all the rest of a step's per-slot work.
template <typename scalar_t>
inline scalar_t dot(const scalar_t* x, const scalar_t* y, int64_t n) {
  scalar_t acc = 0;
#pragma omp simd reduction(+ : acc)
  for (int64_t j = 0; j < n; ++j) acc += x[j] * y[j];
  return acc;
}

struct Sizes {
  int64_t T, B, G, H, A, S;
  bool window, lstm;
};

// Step t's [B, .] slice of a contiguous [T, B, .] history, moved from step to step by changing its
// storage offset: a fresh view per step (select, unbind) costs a microsecond of bookkeeping.
struct StepView {
  Tensor view;
  int64_t step;

  explicit StepView(const Tensor& history)
      : view(at::empty({0}, history.options())), step(history.size(1) * history.size(2)) {
    view.set_(history.storage(), history.storage_offset(), {history.size(1), history.size(2)},
              {history.size(2), 1});
  }

  Tensor& at(int64_t t) {
    view.unsafeGetTensorImpl()->set_storage_offset(t * step);
    return view;
  }
};

// The LSTM's gates in place from their pre-activations `pre` (the [B, 4H] row `gates`), then c_t, tanh c_t
// and h_t = o tanh c_t into `h` (i, f, o = sigmoid; g = tanh(x) = 2 sigmoid(2x) - 1: one vectorised pass).
template <typename scalar_t>
void lstm_forward_step(scalar_t* gates, const scalar_t* c_prev, scalar_t* c, Tensor& pre, const Tensor& tanh_c_view,
                       const Tensor& c_view, const scalar_t* tanh_c, scalar_t* l, int64_t B, int64_t H) {
  const int64_t G = 4 * H;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 2 * H; j < 3 * H; ++j) gates[b * G + j] *= 2;
  pre.sigmoid_();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 2 * H; j < 3 * H; ++j) gates[b * G + j] = 2 * gates[b * G + j] - 1;
  for (int64_t b = 0; b < B; ++b) {
    const scalar_t *i = gates + b * G, *f = i + H, *g = i + 2 * H;
    for (int64_t j = 0; j < H; ++j) c[b * H + j] = f[j] * (c_prev ? c_prev[b * H + j] : scalar_t(0)) + i[j] * g[j];
  }
  Tensor out = tanh_c_view;
  at::tanh_out(out, c_view);
  for (int64_t b = 0; b < B; ++b) {
    const scalar_t* o = gates + b * G + 3 * H;
    for (int64_t j = 0; j < H; ++j) l[b * H + j] = o[j] * tanh_c[b * H + j];
  }
}

// dL/d(gates_t) into `out` [B, 4H] from dL/dh_t (`dh`) and the carried dL/dc_t (`dc`, then carried to
// c_{t-1}; zero when `cut`: the recurrence was detached before step t).
template <typename scalar_t>
void lstm_backward_step(const scalar_t* gates, const scalar_t* tanh_c, const scalar_t* c_prev, const scalar_t* dh,
                        scalar_t* out, scalar_t* dc, int64_t B, int64_t H, bool cut) {
  const int64_t G = 4 * H;
  for (int64_t b = 0; b < B; ++b) {
    const scalar_t *i = gates + b * G, *f = i + H, *g = i + 2 * H, *o = i + 3 * H;
    const scalar_t* tc = tanh_c + b * H;
    const scalar_t* cp = c_prev ? c_prev + b * H : nullptr;
    scalar_t* ob = out + b * G;
    scalar_t* dcb = dc + b * H;
    for (int64_t j = 0; j < H; ++j) {
      const scalar_t dhj = dh[b * H + j];
      // h = o tanh(c); c = f c_{t-1} + i g; sigmoid' = s (1 - s), tanh' = 1 - tanh^2
      const scalar_t dcj = dcb[j] + dhj * (1 - tc[j] * tc[j]) * o[j];
      ob[j] = dcj * g[j] * (i[j] * (1 - i[j]));
      ob[H + j] = (cp ? dcj * cp[j] : scalar_t(0)) * (f[j] * (1 - f[j]));
      ob[2 * H + j] = dcj * i[j] * (1 - g[j] * g[j]);
      ob[3 * H + j] = dhj * tc[j] * (o[j] * (1 - o[j]));
      dcb[j] = cut ? scalar_t(0) : dcj * f[j];
    }
  }
}

template <typename scalar_t>
void forward_loop(const Sizes& d, int64_t cell, int64_t nu, int64_t rho, const Tensor& xw, const Tensor& wq_t,
                  const Tensor& bq, const Tensor& w_rec_t, const Tensor& wk_t, const Tensor& v, const Tensor& bias,
                  const Tensor& h, const Tensor& k, const Tensor& s, const Tensor& q, const Tensor& act,
                  const Tensor& c, const Tensor& tanh_c, const Tensor& alpha, const Tensor& flat) {
  const int64_t T = d.T, B = d.B, G = d.G, H = d.H, A = d.A, S = d.S;
  scalar_t *Hs = h.data_ptr<scalar_t>(), *Ks = k.data_ptr<scalar_t>(), *Ss = s.data_ptr<scalar_t>();
  scalar_t *Qs = q.data_ptr<scalar_t>(), *ACT = act.data_ptr<scalar_t>(), *AL = alpha.data_ptr<scalar_t>();
  scalar_t* Cs = d.lstm ? c.data_ptr<scalar_t>() : nullptr;
  scalar_t* TC = d.lstm ? tanh_c.data_ptr<scalar_t>() : nullptr;
  int64_t* FL = d.window ? nullptr : flat.data_ptr<int64_t>();
  const scalar_t* V = v.data_ptr<scalar_t>();
  const scalar_t* BIAS = bias.data_ptr<scalar_t>();
  Screening<scalar_t> memory(B, d.window ? 1 : nu, d.window ? 0 : rho);  // a window needs none
  std::vector<int64_t> rows(B * S);
  Tensor z = at::empty({B * S * A}, xw.options());
  StepView h_t(h), k_t(k), s_t(s), q_t(q), act_t(act), c_t(d.lstm ? c : h), tanh_c_t(d.lstm ? tanh_c : h);
  const scalar_t* XW = xw.data_ptr<scalar_t>();
  const scalar_t* BQ = bq.data_ptr<scalar_t>();
  const scalar_t inf = std::numeric_limits<scalar_t>::infinity();
  for (int64_t t = 0; t < T; ++t) {
    // q_t = W s_{t-1} + b_W: the bias written in, the product added in place (addmm into another
    // tensor would copy its first argument through a broadcasting pass)
    scalar_t* qt = Qs + t * B * A;
    for (int64_t b = 0; b < B; ++b) std::copy(BQ, BQ + A, qt + b * A);
    if (t) q_t.at(t).addmm_(s_t.at(t - 1), wq_t);
    scalar_t* st = Ss + t * B * H;
    if (t == 0) {
      std::fill(st, st + B * H, scalar_t(0));  // nothing stored yet: the read is 0, and h_{-1} = 0
    } else {
      if (!d.window) {
        memory.insert(t - 1);
        std::copy(memory.flat.begin(), memory.flat.end(), FL + t * B * S);
      }
      const int64_t n = step_slots(t, B, d.window, memory.flat.data(), rows);
      keys_plus_query_tanh<scalar_t>(z, B, n, A, rows, Ks, Qs + t * B * A);
      const scalar_t* Z = z.data_ptr<scalar_t>();
      const scalar_t* h_prev = Hs + (t - 1) * B * H;
      for (int64_t b = 0; b < B; ++b) {
        scalar_t* al = AL + (t * B + b) * S;
        scalar_t top = -inf;
        for (int64_t i = 0; i < n; ++i) {
          al[i] = (d.window || memory.occupied[i]) ? dot(Z + (b * n + i) * A, V, A) : -inf;
          top = std::max(top, al[i]);
        }
        scalar_t total = 0;
        for (int64_t i = 0; i < n; ++i) total += (al[i] = std::exp(al[i] - top));
        for (int64_t i = 0; i < n; ++i) al[i] /= total;
        // s_t = (h_{t-1} + sum_i alpha_i h_i) / 2
        scalar_t* sp = st + b * H;
        const scalar_t* hp = h_prev + b * H;
        for (int64_t j = 0; j < H; ++j) sp[j] = hp[j] / 2;
        for (int64_t i = 0; i < n; ++i) {
          const scalar_t w = al[i] / 2;
          const scalar_t* value = Hs + rows[b * n + i] * H;
          for (int64_t j = 0; j < H; ++j) sp[j] += w * value[j];
        }
      }
      if (!d.window) memory.attended(AL + t * B * S);
    }
    // the cell's pre-activation xw_t + R s_t, then (the LSTM) its gates, in place
    scalar_t* gates = ACT + t * B * G;
    std::copy(XW + t * B * G, XW + (t + 1) * B * G, gates);
    Tensor& pre = act_t.at(t);
    pre.addmm_(s_t.at(t), w_rec_t);
    scalar_t* ht = Hs + t * B * H;
    if (d.lstm) {
      lstm_forward_step<scalar_t>(gates, t ? Cs + (t - 1) * B * H : nullptr, Cs + t * B * H, pre, tanh_c_t.at(t),
                                  c_t.at(t), TC + t * B * H, ht, B, H);
    } else if (cell == kTanh) {
      at::tanh_out(h_t.at(t), pre);
    } else {
      const scalar_t* p = ACT + t * B * G;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < H; ++j) {
          const scalar_t x = p[b * H + j];
          if (cell == kReLU) {
            ht[b * H + j] = x > 0 ? x : scalar_t(0);
          } else {  // modReLU: sign(z) relu(|z| + b)
            const scalar_t m = std::abs(x) + BIAS[j];
            ht[b * H + j] = m > 0 ? (x > 0 ? m : (x < 0 ? -m : scalar_t(0))) : scalar_t(0);
          }
        }
    }
    at::mm_out(k_t.at(t), h_t.at(t), wk_t);
  }
}

std::vector<Tensor> attentive_forward(const Tensor& xw_in, const Tensor& w_rec, const Tensor& wq, const Tensor& bq,
                                      const Tensor& wk, const Tensor& v, const Tensor& bias, int64_t cell, int64_t nu,
                                      int64_t rho) {
  TORCH_CHECK(xw_in.device().is_cpu(), "attentive_forward: the native loop runs on the CPU");
  const Tensor xw = xw_in.contiguous();
  Sizes d{xw.size(0), xw.size(1), xw.size(2), w_rec.size(1), wq.size(0), 0, rho == 0 && nu >= xw.size(0),
          cell == kLSTM};
  d.S = d.window ? d.T : nu + rho;
  const auto opts = xw.options();
  Tensor h = at::empty({d.T, d.B, d.H}, opts), k = at::empty({d.T, d.B, d.A}, opts);
  Tensor s = at::empty({d.T, d.B, d.H}, opts), q = at::empty({d.T, d.B, d.A}, opts);
  Tensor act = at::empty({d.T, d.B, d.G}, opts), alpha = at::zeros({d.T, d.B, d.S}, opts);
  Tensor c = at::empty({0}, opts), tanh_c = at::empty({0}, opts), flat = at::empty({0}, opts.dtype(at::kLong));
  if (d.lstm) {
    c = at::empty({d.T, d.B, d.H}, opts);
    tanh_c = at::empty({d.T, d.B, d.H}, opts);
  }
  if (!d.window) flat = at::zeros({d.T, d.B * d.S}, opts.dtype(at::kLong));
  // Contiguous transposes: a [B, H] x [H, 4H] product reads them twice as fast as transposed views.
  const Tensor w_rec_t = w_rec.t().contiguous(), wq_t = wq.t().contiguous(), wk_t = wk.t().contiguous();
  AT_DISPATCH_FLOATING_TYPES(xw.scalar_type(), "attentive_forward", [&] {
    forward_loop<scalar_t>(d, cell, nu, rho, xw, wq_t, bq.contiguous(), w_rec_t, wk_t, v.contiguous(),
                           bias.contiguous(), h, k, s, q, act, c, tanh_c, alpha, flat);
  });
  return {h, k, s, q, act, c, tanh_c, alpha, flat};
}

template <typename scalar_t>
void backward_loop(const Sizes& d, int64_t cell, const Tensor& w_rec, const Tensor& wq, const Tensor& wk,
                   const Tensor& v, const Tensor& bias, const Tensor& h, const Tensor& k, const Tensor& q,
                   const Tensor& act, const Tensor& c, const Tensor& tanh_c, const Tensor& alpha, const Tensor& flat,
                   const Tensor& d_hist, const Tensor& d_keys, const Tensor& d_xw, const Tensor& d_q,
                   const Tensor& d_v) {
  const int64_t T = d.T, B = d.B, G = d.G, H = d.H, A = d.A, S = d.S;
  const scalar_t *Hs = h.data_ptr<scalar_t>(), *Ks = k.data_ptr<scalar_t>(), *Qs = q.data_ptr<scalar_t>();
  const scalar_t *ACT = act.data_ptr<scalar_t>(), *AL = alpha.data_ptr<scalar_t>(), *V = v.data_ptr<scalar_t>();
  const scalar_t* Cs = d.lstm ? c.data_ptr<scalar_t>() : nullptr;
  const scalar_t* TC = d.lstm ? tanh_c.data_ptr<scalar_t>() : nullptr;
  const scalar_t* BIAS = bias.data_ptr<scalar_t>();
  const int64_t* FL = d.window ? nullptr : flat.data_ptr<int64_t>();
  scalar_t *DH = d_hist.data_ptr<scalar_t>(), *DK = d_keys.data_ptr<scalar_t>(), *DX = d_xw.data_ptr<scalar_t>();
  scalar_t *DQ = d_q.data_ptr<scalar_t>(), *DV = d_v.data_ptr<scalar_t>();
  const auto opts = h.options();
  Tensor d_read = at::zeros({B, H}, opts), z = at::empty({B * S * A}, opts);
  std::vector<scalar_t> dc(d.lstm ? B * H : 0, 0), d_alpha(S);
  std::vector<int64_t> rows(B * S);
  StepView d_hist_t(d_hist), d_keys_t(d_keys), d_xw_t(d_xw), d_q_t(d_q);
  for (int64_t t = T - 1; t >= 0; --t) {
    // h_t's gradient: its reads as a value (in d_hist) and as a key (U' dL/dk_t), all from later steps
    d_hist_t.at(t).addmm_(d_keys_t.at(t), wk);
    const scalar_t* DHt = DH + t * B * H;
    scalar_t* out = DX + t * B * G;  // dL/d xw_t: through the cell
    if (d.lstm) {
      lstm_backward_step<scalar_t>(ACT + t * B * G, TC + t * B * H, t ? Cs + (t - 1) * B * H : nullptr, DHt, out,
                                   dc.data(), B, H, false);
    } else {
      const scalar_t *pre = ACT + t * B * G, *ht = Hs + t * B * H;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < H; ++j) {
          const int64_t x = b * H + j;
          const scalar_t slope = cell == kTanh   ? 1 - ht[x] * ht[x]
                                 : cell == kReLU ? scalar_t(pre[x] > 0)
                                                 : scalar_t(std::abs(pre[x]) + BIAS[j] > 0);
          out[x] = DHt[x] * slope;
        }
    }
    // s_t = (h_{t-1} + read_t) / 2: d_read = dL/ds_t / 2 (through q_{t+1}, then the cell), which h_{t-1} gets too
    d_read.addmm_(d_xw_t.at(t), w_rec, 1, 0.5);
    if (t == 0) break;
    const scalar_t* DR = d_read.data_ptr<scalar_t>();
    scalar_t* dh_prev = DH + (t - 1) * B * H;
    for (int64_t x = 0; x < B * H; ++x) dh_prev[x] += DR[x];
    const int64_t n = step_slots(t, B, d.window, FL ? FL + t * B * S : nullptr, rows);
    keys_plus_query_tanh<scalar_t>(z, B, n, A, rows, Ks, Qs + t * B * A);  // recomputed
    const scalar_t* Z = z.data_ptr<scalar_t>();
    scalar_t* dq = DQ + t * B * A;
    for (int64_t b = 0; b < B; ++b) {
      const scalar_t* al = AL + (t * B + b) * S;
      const scalar_t* dr = DR + b * H;
      scalar_t weighted = 0;
      for (int64_t i = 0; i < n; ++i) {
        d_alpha[i] = dot(Hs + rows[b * n + i] * H, dr, H);
        weighted += al[i] * d_alpha[i];
      }
      for (int64_t i = 0; i < n; ++i) {
        const int64_t row = rows[b * n + i];
        // each stored h_i: alpha_i d_read through the value ...
        scalar_t* dv = DH + row * H;
        for (int64_t j = 0; j < H; ++j) dv[j] += al[i] * dr[j];
        // ... and, through the softmax and e_i = v' tanh(q + U h_i), its key (projected by U' when the
        // reverse loop reaches step i), the query and v
        const scalar_t de = al[i] * (d_alpha[i] - weighted);
        const scalar_t* zp = Z + (b * n + i) * A;
        scalar_t* dk = DK + row * A;
        scalar_t* dqb = dq + b * A;
        for (int64_t a = 0; a < A; ++a) {
          DV[a] += de * zp[a];
          const scalar_t dpre = (1 - zp[a] * zp[a]) * de * V[a];
          dk[a] += dpre;
          dqb[a] += dpre;
        }
      }
    }
    at::addmm_out(d_read, d_read, d_q_t.at(t), wq, 0, 0.5);  // dL/ds_{t-1} / 2 through q_t (beta 0: a product)
  }
}

std::vector<Tensor> attentive_backward(const Tensor& grad_out, const Tensor& w_rec, const Tensor& wq,
                                       const Tensor& wk, const Tensor& v, const Tensor& bias, const Tensor& h,
                                       const Tensor& k, const Tensor& s, const Tensor& q, const Tensor& act,
                                       const Tensor& c, const Tensor& tanh_c, const Tensor& alpha, const Tensor& flat,
                                       int64_t cell) {
  Sizes d{h.size(0), h.size(1), act.size(2), h.size(2), q.size(2), alpha.size(2), flat.numel() == 0, cell == kLSTM};
  Tensor d_hist = grad_out.contiguous().clone();  // the outputs' gradients, then every read's
  Tensor d_keys = at::zeros_like(k), d_xw = at::empty_like(act), d_q = at::zeros_like(q), d_v = at::zeros_like(v);
  const Tensor w_rec_c = w_rec.contiguous(), wq_c = wq.contiguous(), wk_c = wk.contiguous();
  AT_DISPATCH_FLOATING_TYPES(h.scalar_type(), "attentive_backward", [&] {
    backward_loop<scalar_t>(d, cell, w_rec_c, wq_c, wk_c, v.contiguous(), bias.contiguous(), h, k, q, act, c, tanh_c,
                            alpha, flat, d_hist, d_keys, d_xw, d_q, d_v);
  });
  const int64_t T = d.T, B = d.B, H = d.H, A = d.A, G = d.G;
  Tensor d_w_rec = at::mm(d_xw.reshape({T * B, G}).t(), s.reshape({T * B, H}));
  Tensor d_wq = at::mm(d_q.narrow(0, 1, T - 1).reshape({-1, A}).t(), s.narrow(0, 0, T - 1).reshape({-1, H}));
  Tensor d_bq = d_q.sum(at::IntArrayRef{0, 1});
  Tensor d_wk = at::mm(d_keys.reshape({T * B, A}).t(), h.reshape({T * B, H}));
  Tensor d_bias = cell == kModReLU ? (d_xw * at::sign(act)).sum(at::IntArrayRef{0, 1}) : at::zeros_like(bias);
  return {d_xw, d_w_rec, d_wq, d_bq, d_wk, d_v, d_bias};
}


// ---- SAB (Sparse Attentive Backtracking, Ke et al. 2018; agents/cores.py SABCore states the step) ----
//
// From (h_{-1}, c_{-1}) = 0, for t = 0 .. T-1, with n_t = t / stride states stored before step t:
//   gates_t = xw_t + W_hh h_{t-1}; (l_t, c_t) = LSTM(gates_t, c_{t-1})     l_t = o tanh(c_t)
//   q_t = W_q l_t + b_q; e_j = v' tanh(q_t + U m_j), j < n_t
//   w = softmax over the top-k of e (all of them when n_t <= k), 0 elsewhere
//   h_t = l_t + sum_j w_j m_j                                                 the output and the state
//   m_{n} = h_t when (t + 1) % stride == 0 (its key U m_n)
// and the recurrence's gradient cut before step t when t > 0 and t % truncate == 0 (h_{t-1} and
// c_{t-1} detached). Memory j is h at step (j + 1) stride - 1: history row ((j + 1) stride - 1) B + b.

struct SabSizes {
  int64_t T, B, H, A, K, stride, truncate, slots;
};

template <typename scalar_t>
void sab_forward_loop(const SabSizes& d, const Tensor& xw, const Tensor& w_hh_t, const Tensor& wq_t, const Tensor& bq,
                      const Tensor& wk_t, const Tensor& v, const Tensor& h, const Tensor& l, const Tensor& q,
                      const Tensor& act, const Tensor& c, const Tensor& tanh_c, const Tensor& keys,
                      const Tensor& sel, const Tensor& weight) {
  const int64_t T = d.T, B = d.B, H = d.H, A = d.A, K = d.K, G = 4 * H;
  scalar_t *Hs = h.data_ptr<scalar_t>(), *Ls = l.data_ptr<scalar_t>(), *Qs = q.data_ptr<scalar_t>();
  scalar_t *ACT = act.data_ptr<scalar_t>(), *Cs = c.data_ptr<scalar_t>(), *TC = tanh_c.data_ptr<scalar_t>();
  scalar_t *KEYS = keys.data_ptr<scalar_t>(), *W = weight.data_ptr<scalar_t>();
  int64_t* SEL = sel.data_ptr<int64_t>();
  const scalar_t *XW = xw.data_ptr<scalar_t>(), *BQ = bq.data_ptr<scalar_t>(), *V = v.data_ptr<scalar_t>();
  StepView h_t(h), l_t(l), q_t(q), act_t(act), c_t(c), tanh_c_t(tanh_c), key_t(keys);
  Tensor z = at::empty({std::max<int64_t>(d.slots, 1) * B * A}, xw.options());
  std::vector<scalar_t> e(d.slots);
  std::vector<int64_t> order(d.slots), rows(std::max<int64_t>(d.slots, 1) * B);
  for (int64_t t = 0; t < T; ++t) {
    scalar_t* gates = ACT + t * B * G;
    std::copy(XW + t * B * G, XW + (t + 1) * B * G, gates);
    Tensor& pre = act_t.at(t);
    if (t) pre.addmm_(h_t.at(t - 1), w_hh_t);
    scalar_t* lt = Ls + t * B * H;
    lstm_forward_step<scalar_t>(gates, t ? Cs + (t - 1) * B * H : nullptr, Cs + t * B * H, pre, tanh_c_t.at(t),
                                c_t.at(t), TC + t * B * H, lt, B, H);
    scalar_t* ht = Hs + t * B * H;
    std::copy(lt, lt + B * H, ht);
    const int64_t n = t / d.stride, m = std::min(n, K);
    if (n > 0) {
      scalar_t* qt = Qs + t * B * A;
      for (int64_t b = 0; b < B; ++b) std::copy(BQ, BQ + A, qt + b * A);
      q_t.at(t).addmm_(l_t.at(t), wq_t);
      step_slots(n, B, true, nullptr, rows);  // every stored key, as a window's: key j of row b at j B + b
      keys_plus_query_tanh<scalar_t>(z, B, n, A, rows, KEYS, qt);
      const scalar_t* Z = z.data_ptr<scalar_t>();
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t j = 0; j < n; ++j) e[j] = dot(Z + (b * n + j) * A, V, A);
        for (int64_t j = 0; j < n; ++j) order[j] = j;
        if (n > K)  // the top k, highest first (the lower index first on ties)
          std::partial_sort(order.begin(), order.begin() + K, order.begin() + n,
                            [&](int64_t x, int64_t y) { return e[x] > e[y] || (e[x] == e[y] && x < y); });
        int64_t* sb = SEL + (t * B + b) * K;
        scalar_t* wb = W + (t * B + b) * K;
        scalar_t top = -std::numeric_limits<scalar_t>::infinity(), total = 0;
        for (int64_t i = 0; i < m; ++i) top = std::max(top, e[order[i]]);
        for (int64_t i = 0; i < m; ++i) total += (wb[i] = std::exp(e[order[i]] - top));
        scalar_t* hb = ht + b * H;
        for (int64_t i = 0; i < m; ++i) {
          sb[i] = order[i];
          wb[i] /= total;
          const scalar_t* value = Hs + (((order[i] + 1) * d.stride - 1) * B + b) * H;
          for (int64_t x = 0; x < H; ++x) hb[x] += wb[i] * value[x];
        }
      }
    }
    if ((t + 1) % d.stride == 0) at::mm_out(key_t.at((t + 1) / d.stride - 1), h_t.at(t), wk_t);
  }
}

std::vector<Tensor> sab_forward(const Tensor& xw_in, const Tensor& w_hh, const Tensor& wq, const Tensor& bq,
                                const Tensor& wk, const Tensor& v, int64_t topk, int64_t truncate, int64_t stride) {
  TORCH_CHECK(xw_in.device().is_cpu(), "sab_forward: the native loop runs on the CPU");
  const Tensor xw = xw_in.contiguous();
  const int64_t T = xw.size(0), B = xw.size(1), H = w_hh.size(1), A = wq.size(0);
  SabSizes d{T, B, H, A, topk, stride, truncate, T / stride};
  const auto opts = xw.options();
  Tensor h = at::empty({T, B, H}, opts), l = at::empty({T, B, H}, opts), q = at::zeros({T, B, A}, opts);
  Tensor act = at::empty({T, B, 4 * H}, opts), c = at::empty({T, B, H}, opts), tanh_c = at::empty({T, B, H}, opts);
  Tensor keys = at::empty({std::max<int64_t>(d.slots, 1), B, A}, opts);
  Tensor sel = at::zeros({T, B, topk}, opts.dtype(at::kLong)), weight = at::zeros({T, B, topk}, opts);
  const Tensor w_hh_t = w_hh.t().contiguous(), wq_t = wq.t().contiguous(), wk_t = wk.t().contiguous();
  AT_DISPATCH_FLOATING_TYPES(xw.scalar_type(), "sab_forward", [&] {
    sab_forward_loop<scalar_t>(d, xw, w_hh_t, wq_t, bq.contiguous(), wk_t, v.contiguous(), h, l, q, act, c, tanh_c,
                               keys, sel, weight);
  });
  return {h, l, q, act, c, tanh_c, keys, sel, weight};
}

template <typename scalar_t>
void sab_backward_loop(const SabSizes& d, const Tensor& w_hh, const Tensor& wq, const Tensor& wk, const Tensor& v,
                       const Tensor& h, const Tensor& q, const Tensor& act, const Tensor& c, const Tensor& tanh_c,
                       const Tensor& keys, const Tensor& sel, const Tensor& weight, const Tensor& d_h,
                       const Tensor& d_xw, const Tensor& d_q, const Tensor& d_keys, const Tensor& d_v) {
  const int64_t T = d.T, B = d.B, H = d.H, A = d.A, K = d.K, G = 4 * H;
  const scalar_t *Hs = h.data_ptr<scalar_t>(), *Qs = q.data_ptr<scalar_t>(), *ACT = act.data_ptr<scalar_t>();
  const scalar_t *Cs = c.data_ptr<scalar_t>(), *TC = tanh_c.data_ptr<scalar_t>(), *KEYS = keys.data_ptr<scalar_t>();
  const scalar_t *W = weight.data_ptr<scalar_t>(), *V = v.data_ptr<scalar_t>();
  const int64_t* SEL = sel.data_ptr<int64_t>();
  scalar_t *DH = d_h.data_ptr<scalar_t>(), *DX = d_xw.data_ptr<scalar_t>(), *DQ = d_q.data_ptr<scalar_t>();
  scalar_t *DK = d_keys.data_ptr<scalar_t>(), *DV = d_v.data_ptr<scalar_t>();
  StepView d_h_t(d_h), d_xw_t(d_xw), d_q_t(d_q), d_key_t(d_keys);
  Tensor dl = at::empty({B, H}, h.options());
  scalar_t* DL = dl.data_ptr<scalar_t>();
  std::vector<scalar_t> dc(B * H, 0), dw(K);
  Tensor zsel = at::zeros({B * K * A}, h.options());  // tanh(q + key) of the selected, recomputed
  for (int64_t t = T - 1; t >= 0; --t) {
    // h_t's gradient: the output's, later reads of it as a value (already in d_h) and as a key
    if ((t + 1) % d.stride == 0) d_h_t.at(t).addmm_(d_key_t.at((t + 1) / d.stride - 1), wk);
    const scalar_t* dht = DH + t * B * H;
    std::copy(dht, dht + B * H, DL);  // h_t = l_t + read: l_t gets it whole
    const int64_t n = t / d.stride, m = std::min(n, K);
    if (n > 0) {
      scalar_t* dq = DQ + t * B * A;
      scalar_t* ZS = zsel.data_ptr<scalar_t>();
      for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < m; ++i) {
          const scalar_t *kp = KEYS + (SEL[(t * B + b) * K + i] * B + b) * A, *qp = Qs + (t * B + b) * A;
          scalar_t* zp = ZS + (b * K + i) * A;
          for (int64_t a = 0; a < A; ++a) zp[a] = kp[a] + qp[a];
        }
      zsel.tanh_();  // unselected slots (m < K) hold stale values that nothing reads
      for (int64_t b = 0; b < B; ++b) {
        const int64_t* sb = SEL + (t * B + b) * K;
        const scalar_t* wb = W + (t * B + b) * K;
        const scalar_t* dhb = dht + b * H;
        scalar_t weighted = 0;
        for (int64_t i = 0; i < m; ++i) {
          dw[i] = dot(Hs + (((sb[i] + 1) * d.stride - 1) * B + b) * H, dhb, H);
          weighted += wb[i] * dw[i];
        }
        for (int64_t i = 0; i < m; ++i) {
          const int64_t j = sb[i];
          scalar_t* dvalue = DH + (((j + 1) * d.stride - 1) * B + b) * H;  // a state before t
          for (int64_t x = 0; x < H; ++x) dvalue[x] += wb[i] * dhb[x];
          const scalar_t de = wb[i] * (dw[i] - weighted);
          const scalar_t* z = ZS + (b * K + i) * A;
          scalar_t* dk = DK + (j * B + b) * A;
          for (int64_t a = 0; a < A; ++a) {
            DV[a] += de * z[a];
            const scalar_t dpre = (1 - z[a] * z[a]) * de * V[a];
            dk[a] += dpre;
            dq[b * A + a] += dpre;
          }
        }
      }
      dl.addmm_(d_q_t.at(t), wq);  // q_t = W_q l_t + b_q
    }
    // through the LSTM cell, as the attentive LSTM's backward
    const bool cut = t > 0 && t % d.truncate == 0;  // h_{t-1}, c_{t-1} were detached
    lstm_backward_step<scalar_t>(ACT + t * B * G, TC + t * B * H, t ? Cs + (t - 1) * B * H : nullptr, DL,
                                 DX + t * B * G, dc.data(), B, H, cut);
    if (t > 0 && !cut) d_h_t.at(t - 1).addmm_(d_xw_t.at(t), w_hh);
  }
}

std::vector<Tensor> sab_backward(const Tensor& grad_out, const Tensor& w_hh, const Tensor& wq, const Tensor& wk,
                                 const Tensor& v, const Tensor& h, const Tensor& l, const Tensor& q, const Tensor& act,
                                 const Tensor& c, const Tensor& tanh_c, const Tensor& keys, const Tensor& sel,
                                 const Tensor& weight, int64_t topk, int64_t truncate, int64_t stride) {
  const int64_t T = h.size(0), B = h.size(1), H = h.size(2), A = q.size(2);
  SabSizes d{T, B, H, A, topk, stride, truncate, T / stride};
  Tensor d_h = grad_out.contiguous().clone(), d_xw = at::empty_like(act), d_q = at::zeros_like(q);
  Tensor d_keys = at::zeros_like(keys), d_v = at::zeros_like(v);
  const Tensor w_hh_c = w_hh.contiguous(), wq_c = wq.contiguous(), wk_c = wk.contiguous();
  AT_DISPATCH_FLOATING_TYPES(h.scalar_type(), "sab_backward", [&] {
    sab_backward_loop<scalar_t>(d, w_hh_c, wq_c, wk_c, v.contiguous(), h, q, act, c, tanh_c, keys, sel, weight, d_h,
                                d_xw, d_q, d_keys, d_v);
  });
  // the weights' gradients as single products over all steps (truncation stops h_{t-1}'s gradient, not W_hh's)
  Tensor d_w_hh = at::mm(d_xw.narrow(0, 1, T - 1).reshape({-1, 4 * H}).t(), h.narrow(0, 0, T - 1).reshape({-1, H}));
  Tensor d_wq = at::mm(d_q.reshape({T * B, A}).t(), l.reshape({T * B, H}));
  Tensor d_bq = d_q.sum(at::IntArrayRef{0, 1});
  Tensor d_wk = at::zeros_like(wk);
  if (d.slots > 0) {
    Tensor stored = h.narrow(0, stride - 1, (d.slots - 1) * stride + 1).slice(0, 0, c10::nullopt, stride);
    d_wk = at::mm(d_keys.narrow(0, 0, d.slots).reshape({-1, A}).t(), stored.reshape({-1, H}));
  }
  return {d_xw, d_w_hh, d_wq, d_bq, d_wk, d_v};
}

}  // namespace

// The GIL is released for the whole loop (it needs none): a driver's other threads (progress, MLflow's
// async logging, Ray's) go on while a sequence runs.
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using release = pybind11::call_guard<pybind11::gil_scoped_release>;
  m.def("attentive_forward", &attentive_forward, "An attentive core over a sequence (histories for the backward)",
        release());
  m.def("attentive_backward", &attentive_backward, "Its gradients", release());
  m.def("sab_forward", &sab_forward, "SAB over a sequence (histories for the backward)", release());
  m.def("sab_backward", &sab_backward, "Its gradients", release());
}
