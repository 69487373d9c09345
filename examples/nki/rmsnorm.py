"""RMSNorm in NKI: y = x / sqrt(mean(x^2, axis=1) + eps) * gamma, for x [rows, d], gamma [d].

Per 128-row tile: one Scalar-engine activation squares the rows and sums them in the same pass
(its reduce output); a second turns the sums into 1 / sqrt(sum / d + eps) (rsqrt with a scale and
a bias); the Vector engine multiplies each row by its factor and by gamma, which is loaded once,
broadcast across the partitions by the DMA.

Run `python examples/nki/rmsnorm.py [--chip trn2]`.
"""

import argparse

import numpy as np

from trnsim import nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl


@nki.jit
def rmsnorm_kernel(x, gamma, eps=1e-6):
    rows, d = x.shape
    out = nl.ndarray((rows, d), dtype=x.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    g = nl.load(gamma.reshape((1, d)).broadcast_to((P, d)))
    for t in nl.affine_range((rows + P - 1) // P):
        n = min(P, rows - t * P)
        tile = nl.load(x[t * P:t * P + n, :])
        sq_sum = nl.ndarray((n, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(nl.square, tile, reduce_op=nl.add, reduce_res=sq_sum, dtype=nl.float32)
        rstd = nisa.activation(nl.rsqrt, sq_sum, scale=1.0 / d, bias=eps)
        y = nl.multiply(nisa.tensor_scalar(tile, nl.multiply, rstd, dtype=nl.float32), g[0:n, :], dtype=x.dtype)
        nl.store(out[t * P:t * P + n, :], value=y)
    return out


def reference(x, gamma, eps=1e-6):
    x32 = x.astype(np.float32)
    return x32 / np.sqrt((x32 * x32).mean(axis=1, keepdims=True) + eps) * gamma.astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chip", default="trn2")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1000, 4096)).astype(np.float32)
    gamma = rng.standard_normal(4096).astype(np.float32)
    run = nki.simulate(rmsnorm_kernel, x, gamma, chip=args.chip)
    print(f"max error {np.abs(run.outputs - reference(x, gamma)).max():.1e}")
    print(run.summary(top=6))


if __name__ == "__main__":
    main()
