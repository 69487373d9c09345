// Decode attention: a few query tokens against a long KV cache (src/ops/attention_decode.cpp).
#pragma once
#include <cstdint>

#include "trnsim/tiling.h"

namespace trnsim::ops {

// ---- flash-decoding over a contiguous cache. q [B, Hq, Sq, D], k [B, Hkv, S, D],
// v [B, Hkv, S, Dv] (Hq a multiple of Hkv: each k/v head serves Hq / Hkv query heads, and is read
// once for all of them), D, Dv <= 128, (Hq / Hkv) * Sq <= 128 query rows per k/v head. scores =
// scale * q k^T (+ attn_mask: float, added; or bool, True attends; broadcast to [B, Hq, Sq, S]);
// no causal mask. Writes out [B, Hq, Sq, Dv] and, when given, lse [B, Hq, Sq] f32 (logsumexp of
// each row of the masked, scaled scores). A row that sees no key gives zeros (its lse is -inf).
void sdpa_decode(KernelBuilder& kb, const TensorDesc& out, const TensorDesc* lse, const TensorDesc& q,
                 const TensorDesc& k, const TensorDesc& v, const TensorDesc* attn_mask, float scale);

// Whether sdpa_decode takes these shapes (the query rows of one k/v head fit 128 partitions).
bool sdpa_decode_fits(int64_t q_heads, int64_t kv_heads, int64_t q_len, int64_t head_dim, int64_t v_head_dim);

// ---- flash-decoding over a paged cache, laid out as vLLM keeps it: key_cache, value_cache
// [num_blocks, block_size, Hkv, D]; q, out [B, Hq, D] (one query token per sequence). slots
// [B, L] i32: the cache slot (block * block_size + offset) of each position of each sequence, as
// the block tables give it; context_lens [B] i32 (<= L): positions at or past a sequence's
// length are masked (their slots must still lie in the cache). L, the longest context the
// program serves, is a shape of the program: lengths vary without a new program.
void paged_attention_decode(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& q,
                            const TensorDesc& key_cache, const TensorDesc& value_cache, const TensorDesc& slots,
                            const TensorDesc& context_lens, float scale);

}  // namespace trnsim::ops
