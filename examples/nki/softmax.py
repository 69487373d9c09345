"""Row softmax in NKI: y[i, :] = exp(x[i, :] - max_i) / sum(exp(x[i, :] - max_i)).

Rows go on the partitions, 128 at a time. Per tile: the row maxima on the Vector engine, then one
Scalar-engine activation computes exp(x - max) and, in the same pass, the row sums (its reduce
output), then the Vector engine scales by the reciprocals. `softmax_nl` is the same kernel written
with nki.language's nl.softmax, which lowers to the same instructions.

Run `python examples/nki/softmax.py [--chip trn2]`.
"""

import argparse

import numpy as np

from trnsim import nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl


@nki.jit
def softmax_kernel(x):
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    for t in nl.affine_range((rows + P - 1) // P):
        n = min(P, rows - t * P)
        tile = nl.load(x[t * P:t * P + n, :])
        row_max = nisa.tensor_reduce(nl.max, tile, axis=1, dtype=nl.float32, keepdims=True)
        neg_max = nisa.tensor_scalar(row_max, nl.multiply, -1.0)
        row_sum = nl.ndarray((n, 1), dtype=nl.float32, buffer=nl.sbuf)
        e = nisa.activation(nl.exp, tile, bias=neg_max, reduce_op=nl.add, reduce_res=row_sum, dtype=nl.float32)
        inv = nisa.reciprocal(row_sum)
        y = nisa.tensor_scalar(e, nl.multiply, inv, dtype=x.dtype)
        nl.store(out[t * P:t * P + n, :], value=y)
    return out


@nki.jit
def softmax_nl(x):
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    for t in nl.affine_range((rows + P - 1) // P):
        n = min(P, rows - t * P)
        nl.store(out[t * P:t * P + n, :], value=nl.softmax(nl.load(x[t * P:t * P + n, :]), axis=1))
    return out


def reference(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chip", default="trn2")
    args = parser.parse_args()
    x = np.random.default_rng(0).standard_normal((1024, 2048)).astype(np.float32)
    for kernel in (softmax_kernel, softmax_nl):
        run = nki.simulate(kernel, x, chip=args.chip)
        err = np.abs(run.outputs - reference(x)).max()
        print(f"{kernel.__name__}: {run.time_us:.2f} us, max error {err:.1e}")
        print(run.summary(top=5))


if __name__ == "__main__":
    main()
