"""Fused attention backward (flash attention) in NKI for one head, the gradients of
out = softmax(scale * q @ k.T [+ causal mask]) @ v without materialising the seq x seq matrices.

Same layouts as the forward (examples/nki/flash_attention.py): q_t [d, seq_q], k_t [d, seq_k] (head
dim on the partitions), v and the output gradient dout [seq, d]; the gradients come back in the
inputs' layouts (dq_t, dk_t, dv). The backward gets only the forward's inputs and dout (what a
PyTorch custom operator saves), so it recomputes the softmax statistics in a first pass over the
keys: for each tile of 128 queries the running row maximum and sum of the forward, and with them,
rescaled the same way, D = rowsum(P * (dout @ v.T)) (= rowsum(dout * out)). The second pass, key tiles
outer and query tiles inner, recomputes P = exp(scale * q k.T - logsumexp) and dP = dout @ v.T, forms
dS = P * (dP - D) * scale on the Vector engine and accumulates on the Tensor engine dv += P.T @ dout
and dk.T += q.T @ dS in PSUM over the query tiles, and dq.T += k.T @ dS.T into an SBUF accumulator
per query tile. Fully masked (query, key) tiles are skipped at trace time.

Run `python examples/nki/flash_attention_bwd.py [--chip trn2] [--causal]`.
"""

import argparse

import numpy as np

from trnsim import nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl

TILE = 128
NEG = -3.0e38


def _transposed(t, dtype):
    """A [128, n] SBUF tile as [n, 128] in SBUF (through the Tensor engine and PSUM)."""
    return nl.copy(nisa.nc_transpose(t), dtype=dtype)


def _scores(q_t_tile, k_t_tile, scale, causal, qi, kj, i_q, i_k):
    """scale * q k.T for one (query tile, key tile), the causal mask applied on the diagonal."""
    s = nisa.activation(nl.copy, nisa.nc_matmul(q_t_tile, k_t_tile), scale=scale, dtype=nl.float32)
    if causal and kj == qi:
        s = nisa.affine_select(i_q - i_k >= 0, s, NEG)
    return s


@nki.jit
def flash_bwd(q_t, k_t, v, dout, scale=1.0, causal=False):
    d, seq_q = q_t.shape
    _, seq_k = k_t.shape
    assert seq_q % TILE == 0 and seq_k % TILE == 0 and d <= 128 and (not causal or seq_q == seq_k)
    dt = q_t.dtype
    dq_t = nl.ndarray((d, seq_q), dtype=dt, buffer=nl.shared_hbm)
    dk_t = nl.ndarray((d, seq_k), dtype=dt, buffer=nl.shared_hbm)
    dv = nl.ndarray((seq_k, d), dtype=dt, buffer=nl.shared_hbm)
    nq, nk = seq_q // TILE, seq_k // TILE
    i_q = nl.arange(TILE)[:, None]
    i_k = nl.arange(TILE)[None, :]

    # Query-side tiles stay in SBUF for both passes: q.T and q, dout and dout.T per query tile.
    q_t_tiles = [nl.load(q_t[:, i * TILE:(i + 1) * TILE]) for i in range(nq)]        # [d, 128 q]
    q_tiles = [_transposed(t, dt) for t in q_t_tiles]                                  # [128 q, d]
    do_tiles = [nl.load(dout[i * TILE:(i + 1) * TILE, :]) for i in range(nq)]         # [128 q, d]
    do_t_tiles = [_transposed(t, dt) for t in do_tiles]                                # [d, 128 q]
    k_t_tiles = [nl.load(k_t[:, j * TILE:(j + 1) * TILE]) for j in range(nk)]         # [d, 128 k]
    v_t_tiles = [_transposed(nl.load(v[j * TILE:(j + 1) * TILE, :]), dt) for j in range(nk)]  # [d, 128 k]

    # Pass 1: per query tile, -logsumexp of the scores and D = rowsum(P * dP).
    neg_lse, delta = [], []
    for i in nl.sequential_range(nq):
        run_max = nl.full((TILE, 1), NEG, dtype=nl.float32)
        run_sum = nl.zeros((TILE, 1), dtype=nl.float32)
        run_pdp = nl.zeros((TILE, 1), dtype=nl.float32)
        for j in nl.sequential_range(nk):
            if causal and j > i:
                break
            s = _scores(q_t_tiles[i], k_t_tiles[j], scale, causal, i, j, i_q, i_k)
            dp = nisa.nc_matmul(do_t_tiles[i], v_t_tiles[j])                    # [128 q, 128 k] PSUM
            new_max = nl.maximum(run_max, nisa.tensor_reduce(nl.max, s, axis=1, keepdims=True))
            neg_max = nisa.tensor_scalar(new_max, nl.multiply, -1.0)
            block_sum = nl.ndarray((TILE, 1), dtype=nl.float32, buffer=nl.sbuf)
            e = nisa.activation(nl.exp, s, bias=neg_max, reduce_op=nl.add, reduce_res=block_sum,
                                dtype=nl.float32)
            block_pdp = nisa.tensor_reduce(nl.add, nl.multiply(e, dp), axis=1, keepdims=True)
            correction = nisa.activation(nl.exp, run_max, bias=neg_max)
            run_sum = nl.add(nl.multiply(run_sum, correction), block_sum)
            run_pdp = nl.add(nl.multiply(run_pdp, correction), block_pdp)
            run_max = new_max
        lse = nl.add(run_max, nl.log(run_sum))
        neg_lse.append(nisa.tensor_scalar(lse, nl.multiply, -1.0))
        delta.append(nl.divide(run_pdp, run_sum))

    # Pass 2: gradients, key tiles outer (dk, dv accumulate in PSUM), query tiles inner.
    dq_acc = [nl.zeros((d, TILE), dtype=nl.float32) for _ in range(nq)]               # dq.T per query tile
    for j in nl.sequential_range(nk):
        k_tile = _transposed(k_t_tiles[j], dt)                                          # [128 k, d]
        dk_psum = nl.zeros((d, TILE), dtype=nl.float32, buffer=nl.psum)
        dv_psum = nl.zeros((TILE, d), dtype=nl.float32, buffer=nl.psum)
        for i in nl.sequential_range(nq):
            if causal and j > i:
                continue
            s = _scores(q_t_tiles[i], k_t_tiles[j], scale, causal, i, j, i_q, i_k)
            p = nisa.activation(nl.exp, s, bias=neg_lse[i], dtype=dt)                  # [128 q, 128 k]
            dp = nisa.nc_matmul(do_t_tiles[i], v_t_tiles[j])
            # dS = P * (dP - D) * scale
            ds = nl.multiply(nisa.tensor_scalar(dp, nl.subtract, delta[i], op1=nl.multiply, operand1=scale),
                             p, dtype=dt)
            dv_psum += nisa.nc_matmul(p, do_tiles[i])                                  # P.T @ dout
            dk_psum += nisa.nc_matmul(q_tiles[i], ds)                                  # (dS.T @ q).T
            ds_t = _transposed(ds, dt)                                                  # [128 k, 128 q]
            dq_acc[i] = nl.add(dq_acc[i], nisa.nc_matmul(k_tile, ds_t))               # (dS @ k).T
        nl.store(dk_t[:, j * TILE:(j + 1) * TILE], value=nl.copy(dk_psum, dtype=dt))
        nl.store(dv[j * TILE:(j + 1) * TILE, :], value=nl.copy(dv_psum, dtype=dt))
    for i in range(nq):
        nl.store(dq_t[:, i * TILE:(i + 1) * TILE], value=nl.copy(dq_acc[i], dtype=dt))
    return dq_t, dk_t, dv


def reference(q_t, k_t, v, dout, scale=1.0, causal=False):
    """(dq_t, dk_t, dv) of softmax(scale * q k.T) v in float32 numpy."""
    q, k = q_t.astype(np.float32).T, k_t.astype(np.float32).T
    v, dout = v.astype(np.float32), dout.astype(np.float32)
    s = scale * q @ k.T
    if causal:
        s = np.where(np.tril(np.ones(s.shape, dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    dv = p.T @ dout
    dp = dout @ v.T
    ds = p * (dp - (p * dp).sum(axis=1, keepdims=True)) * scale
    return (ds @ k).T, (ds.T @ q).T, dv


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chip", default="trn2")
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--seq", type=int, default=1024)
    args = parser.parse_args()
    import ml_dtypes
    rng = np.random.default_rng(0)
    d = 128
    q_t, k_t = (rng.standard_normal((d, args.seq)).astype(ml_dtypes.bfloat16) for _ in range(2))
    v, dout = (rng.standard_normal((args.seq, d)).astype(ml_dtypes.bfloat16) for _ in range(2))
    scale = 1.0 / np.sqrt(d)
    run = nki.simulate(flash_bwd, q_t, k_t, v, dout, scale, args.causal, chip=args.chip)
    for name, got, ref in zip(("dq", "dk", "dv"), run.outputs, reference(q_t, k_t, v, dout, scale, args.causal)):
        err = np.abs(got.astype(np.float32) - ref).max() / np.abs(ref).max()
        print(f"{name}: max error {err:.1e} of the largest gradient")
    print(run.summary(top=8))


if __name__ == "__main__":
    main()
