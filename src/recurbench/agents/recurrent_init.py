"""Recurrent-matrix initialisations and non-linearities of the RNN-family memory cores.

The facts follow the Kerg et al. reference code's ``RNN.py`` / ``common.py`` as the fact sheet states
them (``shared/reference/kerg_copy_denoise.md``, section 7); the code is written from those equations.

Orthogonal schemes build a skew-symmetric ``A`` and take ``V = expm(A)``, so ``V`` starts orthogonal:

* ``henaff``: ``A`` block-diagonal with 2x2 blocks ``[[0, s], [-s, 0]]``, ``s ~ U(-pi, 0)``
  (Henaff et al. 2016), a zero 1x1 block last when the size is odd;
* ``cayley``: the same blocks with ``s = -sqrt((1 - cos u) / (1 + cos u))``, ``u ~ U(0, pi/2)``;
* ``random``: a Haar-random rotation ``Q`` (``det Q = +1``) and ``A = log Q``;
* ``identity``: ``A = 0``.

Non-orthogonal schemes: ``xavier`` (Xavier-normal) and ``kaiming`` (Kaiming-normal). They may not start
a matrix that must stay orthogonal (expRNN) and :func:`check_scheme` refuses that, as it refuses an
orthogonal scheme for a matrix that is not square.

LSTM gates (``gate_init``, the LSTM-family cores): ``pytorch`` leaves ``nn.LSTMCell``'s own start
(every weight and both biases ``U(-1/sqrt(H), 1/sqrt(H))``); ``xavier`` is the reference code's
``LSTM.py``, whose gates are ``nn.Linear(H + I, H)`` layers over ``[h, x]``, each weight Xavier-normal
(``std = sqrt(2 / (2H + I))``) and each bias ``nn.Linear``'s default ``U(-1/sqrt(H + I), 1/sqrt(H + I))``,
one bias per gate (:func:`init_lstm_gates`); ``chrono:N`` is Tallec & Ollivier's (2018) "chrono"
start for dependencies up to ``N`` steps long: the forget gate's bias ``log u``, ``u ~ U(1, N - 1)`` per
unit, the input gate's ``-log u``, so that each unit's memory first decays over ``1 + u`` steps, spread
from 2 to ``N`` (every weight and the other gates as ``pytorch``).

Non-linearities: ``tanh``, ``relu`` and ``modrelu`` (Arjovsky et al. 2016): ``modReLU(z) = sign(z)
relu(|z| + b)`` with a learned bias ``b`` per unit, initialised ``U(-0.01, 0.01)``. (The reference code's
``relu`` option silently applies none; ``relu`` here is a ReLU.)
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from recurbench.errors import ConfigError

ORTHOGONAL_SCHEMES = ("henaff", "cayley", "random", "identity")
SCHEMES = (*ORTHOGONAL_SCHEMES, "xavier", "kaiming")
NONLINEARITIES = ("tanh", "relu", "modrelu")
GATE_INITS = ("pytorch", "xavier", "chrono:N")


def check_scheme(key: str, scheme: str, rows: int, cols: int, *, orthogonal: bool = False) -> None:
    """Refuse (a :class:`ConfigError` naming ``key``) an unknown scheme, an orthogonal scheme for a
    ``rows x cols`` matrix that is not square, and a non-orthogonal one where ``orthogonal`` is needed."""
    check_scheme_name(key, scheme)
    if scheme in ORTHOGONAL_SCHEMES and rows != cols:
        raise ConfigError(f"{key}: {scheme!r} makes a square orthogonal matrix, but this matrix is {rows} x {cols}")
    if orthogonal and scheme not in ORTHOGONAL_SCHEMES:
        raise ConfigError(f"{key}: this matrix stays orthogonal through training, so it needs an orthogonal start "
                          f"({', '.join(ORTHOGONAL_SCHEMES)}), not {scheme!r}")


def check_scheme_name(key: str, scheme: str) -> None:
    """Refuse (naming ``key``) a scheme that is not one of :data:`SCHEMES`."""
    if scheme not in SCHEMES:
        raise ConfigError(f"{key}: unknown initialisation {scheme!r}; known: {', '.join(SCHEMES)}")


def check_gate_init(key: str, scheme: str) -> None:
    """Refuse (naming ``key``) an LSTM gate initialisation that is not one of :data:`GATE_INITS`
    (``chrono:N`` with a whole ``N`` of at least 3)."""
    if scheme.startswith("chrono:"):
        longest = scheme.removeprefix("chrono:")
        if not longest.isdigit() or int(longest) < 3:
            raise ConfigError(f"{key}: {scheme!r}: chrono:N needs N, the longest dependency in steps, a whole "
                              "number of at least 3")
    elif scheme not in GATE_INITS:
        raise ConfigError(f"{key}: unknown LSTM gate initialisation {scheme!r}; known: {', '.join(GATE_INITS)}")


def init_lstm_gates(cell: nn.LSTMCell, scheme: str, generator: torch.Generator | None = None) -> None:
    """Start ``cell``'s gates by ``scheme`` (in place): ``pytorch`` keeps them, ``xavier`` draws them as
    the reference code's ``LSTM.py`` does, ``chrono:N`` sets the input and forget gates' biases
    (module docstring). ``nn.LSTMCell`` adds two biases; the reference has one per gate, so
    ``bias_hh`` starts at 0 (``chrono``: the input and forget gates' part of it)."""
    check_gate_init("gate_init", scheme)
    if scheme == "pytorch":
        return
    hidden, inputs = cell.hidden_size, cell.input_size
    if scheme.startswith("chrono:"):
        longest = int(scheme.removeprefix("chrono:"))
        with torch.no_grad():  # nn.LSTMCell's gates are stacked [input, forget, cell, output]
            forget = torch.empty(hidden).uniform_(1.0, longest - 1.0, generator=generator).log_()
            cell.bias_ih[hidden:2 * hidden] = forget
            cell.bias_ih[:hidden] = -forget
            cell.bias_hh[: 2 * hidden].zero_()
        return
    bound = 1 / math.sqrt(hidden + inputs)
    with torch.no_grad():
        # Xavier-normal of one gate's [H, H + I] weight: std sqrt(2 / (fan_in + fan_out)); every gate alike.
        std = math.sqrt(2.0 / (2 * hidden + inputs))
        cell.weight_ih.normal_(0.0, std, generator=generator)
        cell.weight_hh.normal_(0.0, std, generator=generator)
        cell.bias_ih.uniform_(-bound, bound, generator=generator)
        cell.bias_hh.zero_()


def check_nonlinearity(key: str, name: str) -> None:
    if name not in NONLINEARITIES:
        raise ConfigError(f"{key}: unknown non-linearity {name!r}; known: {', '.join(NONLINEARITIES)}")


def _block_skew(angles: Tensor, n: int) -> Tensor:
    """The ``n x n`` block-diagonal skew-symmetric matrix with 2x2 blocks ``[[0, s], [-s, 0]]``."""
    A = torch.zeros(n, n, dtype=angles.dtype)
    i = torch.arange(0, 2 * angles.numel(), 2)
    A[i, i + 1] = angles
    A[i + 1, i] = -angles
    return A


def skew_start(scheme: str, n: int, generator: torch.Generator | None = None) -> Tensor:
    """The skew-symmetric ``A`` (float64, ``n x n``) of an orthogonal scheme: ``V = expm(A)``."""
    blocks = n // 2
    if scheme == "henaff":
        return _block_skew(-math.pi * torch.rand(blocks, generator=generator, dtype=torch.float64), n)
    if scheme == "cayley":
        u = (math.pi / 2) * torch.rand(blocks, generator=generator, dtype=torch.float64)
        return _block_skew(-torch.sqrt((1 - torch.cos(u)) / (1 + torch.cos(u))), n)
    if scheme == "random":
        return skew_log(random_rotation(n, generator))
    if scheme == "identity":
        return torch.zeros(n, n, dtype=torch.float64)
    raise ConfigError(f"no skew-symmetric start for the non-orthogonal initialisation {scheme!r}")


def random_rotation(n: int, generator: torch.Generator | None = None) -> Tensor:
    """A Haar-random ``Q`` in SO(n) (float64): QR of a Gaussian matrix, signs fixed, det made +1."""
    q, r = torch.linalg.qr(torch.randn(n, n, generator=generator, dtype=torch.float64))
    q = q * torch.sign(torch.diagonal(r))
    if torch.linalg.det(q) < 0:
        q[:, 0] = -q[:, 0]
    return q


def skew_log(q: Tensor) -> Tensor:
    """A real skew-symmetric ``A`` with ``expm(A) = q`` for a rotation ``q`` (a normal matrix: its
    eigenvectors are unitary, and its eigenvalues ``e^{i theta}`` give ``A = W diag(i theta) W^H``)."""
    w, vecs = torch.linalg.eig(q)
    a = (vecs @ torch.diag(1j * torch.angle(w)) @ vecs.mH).real
    return 0.5 * (a - a.T)


def initialise(weight: Tensor, scheme: str, generator: torch.Generator | None = None) -> None:
    """Fill ``weight`` (in place, no gradient) by ``scheme``."""
    with torch.no_grad():
        if scheme == "xavier":
            nn.init.xavier_normal_(weight, generator=generator)
        elif scheme == "kaiming":
            nn.init.kaiming_normal_(weight, generator=generator)
        else:
            weight.copy_(torch.linalg.matrix_exp(skew_start(scheme, weight.shape[0], generator)))


class ModReLU(nn.Module):
    """``sign(z) relu(|z| + b)``, a learned bias per unit (Arjovsky et al. 2016)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.empty(size).uniform_(-0.01, 0.01))

    def forward(self, z: Tensor) -> Tensor:
        return torch.sign(z) * torch.relu(z.abs() + self.bias)


def make_nonlinearity(name: str, size: int) -> nn.Module:
    """The module of non-linearity ``name`` for ``size`` units."""
    check_nonlinearity("nonlinearity", name)
    factories: dict[str, Callable[[], nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "modrelu": lambda: ModReLU(size)}
    return factories[name]()
