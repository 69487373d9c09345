"""2-D transpose in NKI, two ways: out[N, M] = x[M, N].

  transpose_pe    through the Tensor engine: 128 x 128 blocks transposed into PSUM (nisa.nc_transpose,
                  a matmul with the identity), copied into an SBUF row block of the output
  transpose_dma   by the DMA engines on the way in (nisa.dma_transpose, NeuronCore-v3 and later)

Run `python examples/nki/transpose.py [--chip trn2]`.
"""

import argparse

import numpy as np

from trnsim import nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl

P = nl.tile_size.pmax


@nki.jit
def transpose_pe(x):
    M, N = x.shape
    assert M % P == 0 and N % P == 0, "sizes must be multiples of 128"
    out = nl.ndarray((N, M), dtype=x.dtype, buffer=nl.shared_hbm)
    rows = nl.ndarray((M // P, nl.par_dim(P), N), dtype=x.dtype, buffer=nl.sbuf)
    for i in nl.affine_range(M // P):
        rows[i] = nl.load(x[i * P:(i + 1) * P, :])
    for j in nl.affine_range(N // P):
        out_rows = nl.ndarray((P, M), dtype=x.dtype, buffer=nl.sbuf)
        for i in nl.affine_range(M // P):
            out_rows[:, i * P:(i + 1) * P] = nisa.nc_transpose(rows[i, :, j * P:(j + 1) * P])
        nl.store(out[j * P:(j + 1) * P, :], value=out_rows)
    return out


@nki.jit
def transpose_dma(x):
    M, N = x.shape
    assert M % P == 0 and N % P == 0, "sizes must be multiples of 128"
    out = nl.ndarray((N, M), dtype=x.dtype, buffer=nl.shared_hbm)
    for j in nl.affine_range(N // P):
        out_rows = nl.ndarray((P, M), dtype=x.dtype, buffer=nl.sbuf)
        for i in nl.affine_range(M // P):
            nisa.dma_transpose(out_rows[:, i * P:(i + 1) * P], x[i * P:(i + 1) * P, j * P:(j + 1) * P])
        nl.store(out[j * P:(j + 1) * P, :], value=out_rows)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chip", default="trn2")
    args = parser.parse_args()
    x = np.random.default_rng(0).standard_normal((1024, 2048)).astype(np.float32)
    for kernel in (transpose_pe, transpose_dma):
        run = nki.simulate(kernel, x, chip=args.chip)
        assert np.array_equal(run.outputs, x.T)
        print(f"{kernel.__name__}: {run.time_us:.2f} us (exact)")
        print(run.summary(top=4))


if __name__ == "__main__":
    main()
