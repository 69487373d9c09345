// sdpa_backward's kernel (src/ops/attention_backward.cpp: the plan, the heads and their loads;
// attention_backward_blocks.cpp: the pipeline of a key block's blocks). Private to src/ops.
#pragma once
#include <array>
#include <vector>

#include "attention_common.h"

namespace trnsim::ops::attention_detail {

constexpr const char* kBackwardOp = "scaled_dot_product_attention_backward";


// One call's kernel: the plan (tile counts, modes, key group size), its SBUF and PSUM tiles, and
// the pipeline's state; run() issues every head (sdpa_backward checks the operands first).
class Backward {
public:
    Backward(KernelBuilder& kb, const TensorDesc& dq, const TensorDesc& dk, const TensorDesc& dv,
             const TensorDesc& dout, const TensorDesc& q, const TensorDesc& k, const TensorDesc& v,
             const TensorDesc& out, const TensorDesc& lse, const Shapes& s, const Mask& mask, bool causal,
             float scale);
    void run();

private:
    // Keys are taken up to kMaxGroup kv tiles (one 512-column PSUM bank of scores) at a time, so
    // that each exp, dS and cast covers up to [128, 512]: as many as the SBUF left next to the
    // head's operands holds. Per (q tile, key group) block, rings as deep as the pipeline (see
    // the block loop).
    static constexpr uint32_t kMaxGroup = kScoreCols / kRows;
    static constexpr int kRing = 3;
    static constexpr uint32_t kDqOut = 4;
    // With DMA transposes, dS^T reaches SBUF by an SBUF-to-SBUF DMA transpose instead of the
    // TensorE: a transfer takes a few blocks' time, so dS and dS^T live in deeper rings and the
    // dQ stage runs kDmaLag blocks behind the dK/dV stage (dQ only adds up, so late is fine).
    // Where even one kv tile's deeper rings do not fit, dS^T goes through the TensorE.
    static constexpr int kDmaLag = 4, kDsRing = kDmaLag + 2;
    static constexpr uint32_t kQuad = 4, kQuadRing = 3;
    static constexpr uint32_t kLoadAhead = 8;   // q tiles loaded ahead of the block using them

    uint32_t rows_of(uint32_t i) const { return std::min(kRows, Sq - i * kRows); }
    uint32_t kv_rows_of(uint32_t j) const { return std::min(kRows, Skv - j * kRows); }
    // Per head (b, h) (see head()).
    void head();
    void load_kv_tile(uint32_t j, uint32_t kb0);
    void load_q_tile(uint32_t i);
    void load_q_upto(uint32_t end);
    void load_kv_upto(uint32_t end);
    void store_dq(uint32_t i);
    void prepare_q_tile(uint32_t i);
    // The blocks of the key block starting at kv tile kb0, pipelined.
    void key_block(uint32_t kb0);

    KernelBuilder& kb;
    const TensorDesc& lse;
    const Shapes s;
    const Mask mask;
    const bool causal;
    const float scale;
    const Heads Q, K, V, O, dO, dQ, dK, dV;
    tiling::DmaQueues dmaq;
    Evac evac;
    DType dt;
    uint32_t Sq, Skv, D, Dv, nqt, nkt, block_tiles, group, cols, dq_outs;
    bool dma_t, dst_dma, quad;
    int c_lag, ds_ring;
    Tile q_nat, q_t, do_nat, do_t, o_nat, k_nat, k_t, v_t, v_nat, neg_lse, di, prod, dq_acc, mask_tile, ps_dk, ps_dv;
    std::array<Tile, kRing> p_sb, ds_f32, s_sb;
    std::array<Tile, kDsRing> ds_mm, dst_sb;
    std::array<Tile, kQuadRing> dst_quad;   // quad mode: [128 keys, kv tile, q tile of the quad, 128 queries]
    std::array<Tile, 2> dk_out, dv_out, dkt_out, dvt_out;
    std::array<Tile, 2 * kQuad> dq_out, dqt_out;   // dq_outs of them
    std::array<Tile, 2> ps_load, ps_s, ps_dp, ps_dst, ps_dq;
    int ps_load_next = 0;
    uint32_t dst_next = 0;
    uint32_t groups_finished = 0;
    std::vector<char> q_tile_ready, dq_started, dq_stored;
    // The head being issued, and its tiles loaded so far (kv tiles of the key block at kv_base).
    int64_t b = 0, h = 0;
    uint32_t q_next = 0, kv_next = 0, kv_base = 0;
};

}  // namespace trnsim::ops::attention_detail
