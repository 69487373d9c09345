"""Fused attention forward (flash attention) in NKI for one head:
out = softmax(scale * q @ k.T [+ causal mask]) @ v, never materialising the seq x seq scores.

Inputs as the Tensor engine wants them: q_t [d, seq_q] and k_t [d, seq_k] (head dim on the
partitions, d <= 128), v [seq_k, d]. For each tile of 128 queries, key blocks of 512 stream by:
scores of the block on the Tensor engine into one PSUM bank, scaled out of PSUM by the Scalar engine
(the causal mask applied by the GpSimd engine's affine_select), the running row maximum and the
exponentials with their row sums (one Scalar-engine pass), probabilities transposed on the Tensor
engine and multiplied with the value rows, the running output rescaled by exp(old max - new max).
Fully masked key blocks are skipped at trace time.

Run `python examples/nki/flash_attention.py [--chip trn2] [--causal]`.
"""

import argparse

import numpy as np

from trnsim import nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl

Q_TILE, K_BLOCK, K_TILE = 128, 512, 128


@nki.jit
def flash_fwd(q_t, k_t, v, scale=1.0, causal=False):
    d, seq_q = q_t.shape
    _, seq_k = k_t.shape
    assert seq_q % Q_TILE == 0 and seq_k % K_BLOCK == 0 and d <= 128
    out = nl.ndarray((seq_q, d), dtype=v.dtype, buffer=nl.shared_hbm)
    i_q = nl.arange(Q_TILE)[:, None]
    i_k = nl.arange(K_BLOCK)[None, :]
    for qi in nl.affine_range(seq_q // Q_TILE):
        q_tile = nl.load(q_t[:, qi * Q_TILE:(qi + 1) * Q_TILE])              # [d, 128 queries]
        run_max = nl.full((Q_TILE, 1), -3.0e38, dtype=nl.float32)
        run_sum = nl.zeros((Q_TILE, 1), dtype=nl.float32)
        acc = nl.zeros((Q_TILE, d), dtype=nl.float32)
        for kb in nl.sequential_range(seq_k // K_BLOCK):
            if causal and kb * K_BLOCK > qi * Q_TILE + Q_TILE - 1:
                break                                                         # every key is in the future
            k_tile = nl.load(k_t[:, kb * K_BLOCK:(kb + 1) * K_BLOCK])         # [d, 512 keys]
            scores = nisa.activation(nl.copy, nisa.nc_matmul(q_tile, k_tile), scale=scale, dtype=nl.float32)
            if causal and kb * K_BLOCK + K_BLOCK - 1 > qi * Q_TILE:
                # keep key j for query i where qi*128 + i >= kb*512 + j
                scores = nisa.affine_select(i_q - i_k >= kb * K_BLOCK - qi * Q_TILE, scores, -3.0e38)
            new_max = nl.maximum(run_max, nisa.tensor_reduce(nl.max, scores, axis=1, keepdims=True))
            neg_max = nisa.tensor_scalar(new_max, nl.multiply, -1.0)
            block_sum = nl.ndarray((Q_TILE, 1), dtype=nl.float32, buffer=nl.sbuf)
            probs = nisa.activation(nl.exp, scores, bias=neg_max, reduce_op=nl.add, reduce_res=block_sum,
                                    dtype=v.dtype)
            correction = nisa.activation(nl.exp, run_max, bias=neg_max)       # exp(old max - new max)
            run_sum = nl.add(nl.multiply(run_sum, correction), block_sum)
            pv = nl.zeros((Q_TILE, d), dtype=nl.float32, buffer=nl.psum)
            for j in nl.affine_range(K_BLOCK // K_TILE):
                probs_t = nl.copy(nisa.nc_transpose(probs[:, j * K_TILE:(j + 1) * K_TILE]))  # [128 keys, 128 q]
                row = kb * K_BLOCK + j * K_TILE
                pv += nisa.nc_matmul(probs_t, nl.load(v[row:row + K_TILE, :]))
            acc = nl.add(nisa.tensor_scalar(acc, nl.multiply, correction), pv)
            run_max = new_max
        nl.store(out[qi * Q_TILE:(qi + 1) * Q_TILE, :],
                 value=nisa.tensor_scalar(acc, nl.multiply, nisa.reciprocal(run_sum), dtype=v.dtype))
    return out


def reference(q_t, k_t, v, scale=1.0, causal=False):
    s = scale * (q_t.astype(np.float32).T @ k_t.astype(np.float32))
    if causal:
        s = np.where(np.tril(np.ones(s.shape, dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)) @ v.astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chip", default="trn2")
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--seq", type=int, default=2048)
    args = parser.parse_args()
    import ml_dtypes
    rng = np.random.default_rng(0)
    d = 128
    q_t, k_t = (rng.standard_normal((d, args.seq)).astype(ml_dtypes.bfloat16) for _ in range(2))
    v = rng.standard_normal((args.seq, d)).astype(ml_dtypes.bfloat16)
    run = nki.simulate(flash_fwd, q_t, k_t, v, 1.0 / np.sqrt(d), args.causal, chip=args.chip)
    ref = reference(q_t, k_t, v, 1.0 / np.sqrt(d), args.causal)
    print(f"max error {np.abs(run.outputs.astype(np.float32) - ref).max():.1e}")
    print(run.summary(top=8))


if __name__ == "__main__":
    main()
