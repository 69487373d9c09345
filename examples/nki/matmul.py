"""Matrix multiplication in NKI, in the steps of AWS's NKI matmul tutorial, on trnsim.

Each kernel computes result[M, N] = lhsT[K, M].T @ rhs[K, N] (the left operand arrives
transposed: the contraction dim K goes on the partitions, as the Tensor engine wants it):

  matmul_basic        one 128 x 64 x 512 tile: two loads, one nc_matmul, a copy out of PSUM, a store
  matmul_tiled        loops over M, N, K tiles; every tile loaded for every matmul
  matmul_hoist_load   the lhsT column of tiles loaded once per M tile, the rhs column once per (M, N)
  matmul_block_free   M and N blocked: each loaded tile serves several matmuls
  matmul_blocked      all three dims blocked, partial sums of each K block added into an SBUF
                      accumulator, so large blocks of both operands stay on chip (the tutorial's
                      final step)

Run `python examples/nki/matmul.py [--chip trn2]` to check each against numpy and print its
simulated time and MFU.
"""

import argparse

import numpy as np

from trnsim import nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl

TILE_K = nl.tile_size.pmax                   # 128: contraction rows per matmul (partitions)
TILE_M = nl.tile_size.gemm_stationary_fmax   # 128: stationary free size
TILE_N = nl.tile_size.gemm_moving_fmax       # 512: moving free size (one PSUM bank of fp32)


@nki.jit
def matmul_basic(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    i_k, i_m = nl.mgrid[0:K, 0:M]
    j_k, j_n = nl.mgrid[0:K, 0:N]
    a = nl.load(lhsT[i_k, i_m])
    b = nl.load(rhs[j_k, j_n])
    acc = nisa.nc_matmul(a, b)                 # a PSUM tile [M, N] of fp32
    out = nl.copy(acc, dtype=result.dtype)     # PSUM -> SBUF (DMA cannot read PSUM)
    i_o, j_o = nl.mgrid[0:M, 0:N]
    nl.store(result[i_o, j_o], value=out)
    return result


@nki.jit
def matmul_tiled(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TILE_M):
        for n in nl.affine_range(N // TILE_N):
            acc = nl.zeros((TILE_M, TILE_N), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TILE_K):
                a = nl.load(lhsT[k * TILE_K:(k + 1) * TILE_K, m * TILE_M:(m + 1) * TILE_M])
                b = nl.load(rhs[k * TILE_K:(k + 1) * TILE_K, n * TILE_N:(n + 1) * TILE_N])
                acc += nisa.nc_matmul(a, b)
            nl.store(result[m * TILE_M:(m + 1) * TILE_M, n * TILE_N:(n + 1) * TILE_N],
                     value=nl.copy(acc, dtype=result.dtype))
    return result


@nki.jit
def matmul_hoist_load(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TILE_M):
        a_tiles = nl.ndarray((K // TILE_K, nl.par_dim(TILE_K), TILE_M), dtype=lhsT.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(K // TILE_K):
            a_tiles[k] = nl.load(lhsT[k * TILE_K:(k + 1) * TILE_K, m * TILE_M:(m + 1) * TILE_M])
        for n in nl.affine_range(N // TILE_N):
            b_tiles = nl.ndarray((K // TILE_K, nl.par_dim(TILE_K), TILE_N), dtype=rhs.dtype, buffer=nl.sbuf)
            for k in nl.affine_range(K // TILE_K):
                b_tiles[k] = nl.load(rhs[k * TILE_K:(k + 1) * TILE_K, n * TILE_N:(n + 1) * TILE_N])
            acc = nl.zeros((TILE_M, TILE_N), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TILE_K):
                acc += nisa.nc_matmul(a_tiles[k], b_tiles[k])
            nl.store(result[m * TILE_M:(m + 1) * TILE_M, n * TILE_N:(n + 1) * TILE_N],
                     value=nl.copy(acc, dtype=result.dtype))
    return result


@nki.jit
def matmul_block_free(lhsT, rhs, tiles_m=2, tiles_n=2):
    K, M = lhsT.shape
    _, N = rhs.shape
    block_m, block_n = TILE_M * tiles_m, TILE_N * tiles_n
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // block_m):
        # One load per K tile brings a whole block of M columns: [TILE_K, block_m].
        a_tiles = nl.ndarray((K // TILE_K, nl.par_dim(TILE_K), block_m), dtype=lhsT.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(K // TILE_K):
            a_tiles[k] = nl.load(lhsT[k * TILE_K:(k + 1) * TILE_K, m * block_m:(m + 1) * block_m])
        for n in nl.affine_range(N // block_n):
            b_tiles = nl.ndarray((K // TILE_K, nl.par_dim(TILE_K), block_n), dtype=rhs.dtype, buffer=nl.sbuf)
            for k in nl.affine_range(K // TILE_K):
                b_tiles[k] = nl.load(rhs[k * TILE_K:(k + 1) * TILE_K, n * block_n:(n + 1) * block_n])
            for bm in nl.affine_range(tiles_m):
                for bn in nl.affine_range(tiles_n):
                    acc = nl.zeros((TILE_M, TILE_N), nl.float32, buffer=nl.psum)
                    for k in nl.affine_range(K // TILE_K):
                        acc += nisa.nc_matmul(a_tiles[k, :, bm * TILE_M:(bm + 1) * TILE_M],
                                              b_tiles[k, :, bn * TILE_N:(bn + 1) * TILE_N])
                    row, col = m * block_m + bm * TILE_M, n * block_n + bn * TILE_N
                    nl.store(result[row:row + TILE_M, col:col + TILE_N], value=nl.copy(acc, dtype=result.dtype))
    return result


@nki.jit
def matmul_blocked(lhsT, rhs, tiles_m=16, tiles_n=2, tiles_k=8):
    """All dims blocked. For each N block and each K block, the rhs block [block_k, block_n] is
    loaded once and every M block is multiplied with it; each K block's partial sums leave PSUM
    into an SBUF accumulator holding the whole [M, N block] result column."""
    K, M = lhsT.shape
    _, N = rhs.shape
    block_m, block_n, block_k = TILE_M * tiles_m, TILE_N * tiles_n, TILE_K * tiles_k
    assert M % block_m == 0 and N % block_n == 0 and K % block_k == 0, "sizes must be multiples of the blocks"
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    # The sums of one N block (all of M) in the result's dtype, as the tutorial keeps them, reused by
    # every N block; what this leaves of SBUF double-buffers the operand blocks.
    sums = [nl.ndarray((tiles_m * tiles_n, nl.par_dim(TILE_M), TILE_N), dtype=result.dtype, buffer=nl.sbuf)
            for _ in range(M // block_m)]
    for n in nl.affine_range(N // block_n):
        for k in nl.sequential_range(K // block_k):
            b_tiles = nl.ndarray((tiles_k, nl.par_dim(TILE_K), block_n), dtype=rhs.dtype, buffer=nl.sbuf)
            for bk in nl.affine_range(tiles_k):
                row = k * block_k + bk * TILE_K
                b_tiles[bk] = nl.load(rhs[row:row + TILE_K, n * block_n:(n + 1) * block_n])
            for m in nl.affine_range(M // block_m):
                a_tiles = nl.ndarray((tiles_k, nl.par_dim(TILE_K), block_m), dtype=lhsT.dtype, buffer=nl.sbuf)
                for bk in nl.affine_range(tiles_k):
                    row = k * block_k + bk * TILE_K
                    a_tiles[bk] = nl.load(lhsT[row:row + TILE_K, m * block_m:(m + 1) * block_m])
                for bn in nl.affine_range(tiles_n):
                    for bm in nl.affine_range(tiles_m):
                        acc = nl.zeros((TILE_M, TILE_N), nl.float32, buffer=nl.psum)
                        for bk in nl.affine_range(tiles_k):
                            acc += nisa.nc_matmul(a_tiles[bk, :, bm * TILE_M:(bm + 1) * TILE_M],
                                                  b_tiles[bk, :, bn * TILE_N:(bn + 1) * TILE_N])
                        if k == 0:
                            sums[m][bm * tiles_n + bn] = acc     # first K block: copy out of PSUM
                        else:
                            sums[m][bm * tiles_n + bn] += acc    # later ones: add into the SBUF sum
        for m in nl.affine_range(M // block_m):
            for bm in nl.affine_range(tiles_m):
                for bn in nl.affine_range(tiles_n):
                    row, col = m * block_m + bm * TILE_M, n * block_n + bn * TILE_N
                    nl.store(result[row:row + TILE_M, col:col + TILE_N],
                             value=nl.copy(sums[m][bm * tiles_n + bn], dtype=result.dtype))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chip", default="trn2")
    args = parser.parse_args()
    import ml_dtypes
    rng = np.random.default_rng(0)

    def operands(k, m, n):
        return (rng.standard_normal((k, m)).astype(ml_dtypes.bfloat16),
                rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16))

    cases = [(matmul_basic, operands(128, 64, 512), {}),
             (matmul_tiled, operands(1024, 512, 1024), {}),
             (matmul_hoist_load, operands(1024, 512, 1024), {}),
             (matmul_block_free, operands(1024, 512, 1024), {}),
             (matmul_blocked, operands(1024, 512, 1024), dict(tiles_m=4, tiles_n=2, tiles_k=4))]
    print(f"{'kernel':<20}{'K x M x N':>18}{'time us':>10}{'MFU':>8}{'max err':>10}")
    for kernel, (a, b), kw in cases:
        run = nki.simulate(kernel, a, b, chip=args.chip, **kw)
        ref = a.astype(np.float32).T @ b.astype(np.float32)
        err = np.abs(run.outputs.astype(np.float32) - ref).max() / np.abs(ref).max()
        k, m = a.shape
        print(f"{kernel.__name__:<20}{f'{k}x{m}x{b.shape[1]}':>18}{run.time_us:>10.2f}{100 * run.mfu():>7.1f}%"
              f"{err:>10.1e}")


if __name__ == "__main__":
    main()
