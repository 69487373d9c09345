"""LayerNorm in NKI: y = (x - mean) / sqrt(var + eps) * gamma + beta over each row of x [rows, d].

Per 128-row tile, two Scalar-engine passes with their reduce outputs give the row sums of x and of
(x - mean)^2; the Vector engine centres, scales and applies gamma and beta (loaded once, broadcast
across the partitions by the DMA).

Run `python examples/nki/layernorm.py [--chip trn2]`.
"""

import argparse

import numpy as np

from trnsim import nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl


@nki.jit
def layernorm_kernel(x, gamma, beta, eps=1e-5):
    rows, d = x.shape
    out = nl.ndarray((rows, d), dtype=x.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    g = nl.load(gamma.reshape((1, d)).broadcast_to((P, d)))
    b = nl.load(beta.reshape((1, d)).broadcast_to((P, d)))
    for t in nl.affine_range((rows + P - 1) // P):
        n = min(P, rows - t * P)
        tile = nl.load(x[t * P:t * P + n, :])
        total = nl.ndarray((n, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(nl.copy, tile, reduce_op=nl.add, reduce_res=total, dtype=nl.float32)
        neg_mean = nisa.tensor_scalar(total, nl.multiply, -1.0 / d)
        centred = nisa.tensor_scalar(tile, nl.add, neg_mean, dtype=nl.float32)
        sq_total = nl.ndarray((n, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(nl.square, centred, reduce_op=nl.add, reduce_res=sq_total, dtype=nl.float32)
        rstd = nisa.activation(nl.rsqrt, sq_total, scale=1.0 / d, bias=eps)
        y = nl.multiply(nisa.tensor_scalar(centred, nl.multiply, rstd), g[0:n, :])
        nl.store(out[t * P:t * P + n, :], value=nl.add(y, b[0:n, :], dtype=x.dtype))
    return out


def reference(x, gamma, beta, eps=1e-5):
    x32 = x.astype(np.float32)
    mean = x32.mean(axis=1, keepdims=True)
    var = ((x32 - mean) ** 2).mean(axis=1, keepdims=True)
    return (x32 - mean) / np.sqrt(var + eps) * gamma + beta


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chip", default="trn2")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1000, 4096)).astype(np.float32)
    gamma, beta = rng.standard_normal(4096).astype(np.float32), rng.standard_normal(4096).astype(np.float32)
    run = nki.simulate(layernorm_kernel, x, gamma, beta, chip=args.chip)
    print(f"max error {np.abs(run.outputs - reference(x, gamma, beta)).max():.1e}")
    print(run.summary(top=6))


if __name__ == "__main__":
    main()
