"""LayerNorm in NKI: y = (x - mean) / sqrt(var + eps) * gamma + beta over each row of x [rows, d].

Per 128-row tile, two Scalar-engine passes with their reduce outputs give the row sums of x and of
(x - mean)^2; the Vector engine centres, scales and applies gamma and beta (loaded once, broadcast
across the partitions by the DMA).

`layernorm_bn_kernel` computes the statistics as the NKI compiler's LayerNorm does: `nisa.bn_stats`
on each 512-wide chunk of a row tile (count, mean and variance * count of its even and odd elements)
and one `nisa.bn_aggr` merging them into the mean and variance, both on the Vector engine, in one
pass over the data and without a Scalar-engine reduction; the normalisation and gamma / beta are two
`nisa.scalar_tensor_tensor` instructions.

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


@nki.jit
def layernorm_bn_kernel(x, gamma, beta, eps=1e-5):
    rows, d = x.shape
    out = nl.ndarray((rows, d), dtype=x.dtype, buffer=nl.shared_hbm)
    P, fmax = nl.tile_size.pmax, nl.tile_size.bn_stats_fmax
    chunks = (d + fmax - 1) // fmax
    g = nl.load(gamma.reshape((1, d)).broadcast_to((P, d)))
    b = nl.load(beta.reshape((1, d)).broadcast_to((P, d)))
    for t in nl.affine_range((rows + P - 1) // P):
        n = min(P, rows - t * P)
        tile = nl.load(x[t * P:t * P + n, :])
        stats = nl.ndarray((n, chunks * 6), dtype=nl.float32, buffer=nl.sbuf)
        for c in nl.affine_range(chunks):
            width = min(fmax, d - c * fmax)
            nisa.bn_stats(dst=stats[:, c * 6:c * 6 + 6], data=tile[:, c * fmax:c * fmax + width])
        mean_var = nisa.bn_aggr(stats)                                     # [n, 2]: mean, variance
        rstd = nisa.activation(nl.rsqrt, mean_var[:, 1:2], bias=eps)
        # (x - mean) * gamma, then that * rstd + beta: two Vector-engine instructions
        xg = nisa.scalar_tensor_tensor(data=tile, op0=nl.subtract, operand0=mean_var[:, 0:1],
                                       op1=nl.multiply, operand1=g[0:n, :], dtype=nl.float32)
        y = nisa.scalar_tensor_tensor(data=xg, op0=nl.multiply, operand0=rstd, op1=nl.add, operand1=b[0:n, :],
                                      dtype=x.dtype)
        nl.store(out[t * P:t * P + n, :], value=y)
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
    ref = reference(x, gamma, beta)
    for kernel in (layernorm_kernel, layernorm_bn_kernel):
        run = nki.simulate(kernel, x, gamma, beta, chip=args.chip)
        print(f"{kernel.__name__}: max error {np.abs(run.outputs - ref).max():.1e}")
        print(run.summary(top=6))


if __name__ == "__main__":
    main()
