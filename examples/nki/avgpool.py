"""2-D average pooling in NKI: out[c, i, j] = mean of x[c, pool*i : pool*(i+1), pool*j : pool*(j+1)].

Channels go on the partitions. The pooling windows are a strided view of the loaded tile, indexed
with an nl.mgrid of five axes (channel, output row, output column, window row, window column):
`tile[i_c, pool * i_h + i_kh, pool * i_w + i_kw]` is [C, H/pool, W/pool, pool, pool] without any
copy, and one Vector-engine reduction over its two innermost axes sums every window.

Run `python examples/nki/avgpool.py [--chip trn2]`.
"""

import argparse

import numpy as np

from trnsim import nki
import trnsim.nki.language as nl


@nki.jit
def avg_pool2d(x, pool=2):
    C, H, W = x.shape
    Ho, Wo = H // pool, W // pool
    out = nl.ndarray((C, Ho, Wo), dtype=x.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    for t in nl.affine_range((C + P - 1) // P):
        n = min(P, C - t * P)
        tile = nl.load(x[t * P:t * P + n, 0:Ho * pool, 0:Wo * pool])
        i_c, i_h, i_w, i_kh, i_kw = nl.mgrid[0:n, 0:Ho, 0:Wo, 0:pool, 0:pool]
        windows = tile[i_c, pool * i_h + i_kh, pool * i_w + i_kw]
        sums = nl.sum(windows, axis=(3, 4), dtype=nl.float32)
        nl.store(out[t * P:t * P + n], value=nl.multiply(sums, 1.0 / (pool * pool), dtype=x.dtype))
    return out


def reference(x, pool=2):
    C, H, W = x.shape
    Ho, Wo = H // pool, W // pool
    return x[:, :Ho * pool, :Wo * pool].reshape(C, Ho, pool, Wo, pool).mean(axis=(2, 4))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chip", default="trn2")
    args = parser.parse_args()
    x = np.random.default_rng(0).standard_normal((256, 64, 64)).astype(np.float32)
    run = nki.simulate(avg_pool2d, x, chip=args.chip)
    print(f"max error {np.abs(run.outputs - reference(x)).max():.1e}")
    print(run.summary(top=5))


if __name__ == "__main__":
    main()
