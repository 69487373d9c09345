// Reduction operators run as simulator kernels and match C++ references:
// sum/mean/max/min over inner, outer, several and all dims (one tile and
// chunked across tiles; whole tensors across all partitions), var/std with correction, max/min with first-occurrence
// indices (NaN included), for f32 and bf16, contiguous and strided inputs.
#include "ops_test_util.h"

#include <limits>

using namespace trnsim;
using namespace trnsim::ops_test;
using ops::Reduce;

namespace {

class OpsReduce : public ::testing::Test, public OpsHarness {};

// Output shape with the reduced dims kept as size 1, and the reference over them.
std::vector<int64_t> kept_shape(const std::vector<int64_t>& sizes, const std::vector<int64_t>& dims) {
    std::vector<int64_t> out = sizes;
    for (int64_t d : dims) out[d] = 1;
    return out;
}

// Calls fn(out_index, values of the reduced group) for every output element.
void for_each_group(const TensorDesc& in, const std::vector<float>& x, const std::vector<int64_t>& dims,
                    const std::function<void(int64_t, const std::vector<double>&)>& fn) {
    const std::vector<int64_t> ks = kept_shape(in.sizes, dims);
    std::vector<int64_t> red_sizes;
    for (int64_t d : dims) red_sizes.push_back(in.sizes[d]);
    int64_t o = 0;
    for_each_index(ks, [&](const std::vector<int64_t>& kidx) {
        std::vector<double> vals;
        for_each_index(red_sizes, [&](const std::vector<int64_t>& ridx) {
            std::vector<int64_t> idx = kidx;
            for (size_t i = 0; i < dims.size(); ++i) idx[dims[i]] = ridx[i];
            vals.push_back(x[storage_index(in, idx)]);
        });
        fn(o++, vals);
    });
}

double reduce_ref(Reduce op, const std::vector<double>& v) {
    double r = op == Reduce::max ? -INFINITY : op == Reduce::min ? INFINITY : 0;
    for (double a : v) r = op == Reduce::max ? std::max(r, a) : op == Reduce::min ? std::min(r, a) : r + a;
    return op == Reduce::mean ? r / v.size() : r;
}

}  // namespace

TEST_F(OpsReduce, SumMeanMaxMinOverVariousDims) {
    struct Case {
        std::vector<int64_t> sizes;
        std::vector<int64_t> dims;
        bool transposed;
    };
    const std::vector<Case> cases = {
        {{3, 5, 7}, {2}, false},    {{3, 5, 7}, {1}, false},   {{3, 5, 7}, {0, 2}, false},
        {{3, 5, 7}, {}, false},     {{130, 257}, {1}, false},  {{130, 257}, {0}, false},
        {{130, 257}, {1}, true},    {{1}, {0}, false},          {{2, 9000}, {1}, false},
        {{300, 4}, {0, 1}, false},  {{6, 5000}, {0}, false},
        {{70, 129, 3}, {}, false},  {{3, 700001}, {}, false},   // whole-tensor path: a tail, several chunks
    };
    for (DType dt : {DType::f32, DType::bf16}) {
        for (const Case& c : cases) {
            TensorDesc in = view(2, dt, c.sizes);
            if (c.transposed) in = view(2, dt, c.sizes, {1, c.sizes[0]});
            std::vector<float> x = put_random(in);
            const std::vector<int64_t> dims = c.dims.empty() ? [&] {
                std::vector<int64_t> all;
                for (size_t d = 0; d < c.sizes.size(); ++d) all.push_back(d);
                return all;
            }() : c.dims;
            for (Reduce op : {Reduce::sum, Reduce::mean, Reduce::max, Reduce::min}) {
                const TensorDesc out = view(1, dt, kept_shape(c.sizes, dims));
                KernelBuilder kb = builder("reduce");
                ops::reduce(kb, op, out, in, c.dims);
                run(kb);
                std::vector<double> ref(out.numel());
                for_each_group(in, x, dims, [&](int64_t o, const std::vector<double>& v) { ref[o] = reduce_ref(op, v); });
                const std::vector<float> got = get(out);
                for (size_t i = 0; i < ref.size(); ++i) {
                    const double n = std::sqrt(double(in.numel() / out.numel()));
                    const double tol = dt == DType::bf16 ? 1e-2 * (1 + std::abs(ref[i])) : 1e-5 * (1 + n) * (1 + std::abs(ref[i]));
                    ASSERT_NEAR(got[i], ref[i], tol) << "op " << int(op) << " " << in.str() << " at " << i;
                }
            }
        }
    }
}

// Reductions over leading dims with a contiguous kept dim take the column path (rows on
// partitions, accumulation across row tiles, TensorE transposes across partitions).
TEST_F(OpsReduce, ColumnReductionsOverLeadingDims) {
    struct Case {
        std::vector<int64_t> sizes, strides;   // empty strides = contiguous
        std::vector<int64_t> dims;
        int64_t out_stride;                    // elements between neighbouring outputs (1-D outs)
    };
    const std::vector<Case> cases = {
        {{100, 64}, {}, {0}, 1},              // one block: transposes read the loaded tile
        {{2000, 40}, {}, {0}, 1},             // blocks of several rows per partition, then a tail
        {{1600, 1030}, {}, {0}, 1},           // four blocks on two engines, partial column block
        {{4, 70, 96}, {}, {0, 1}, 1},         // leading dims merged into one
        {{4, 70, 96}, {70 * 96 * 2, 96, 1}, {0, 1}, 1},   // leading dims that do not merge
        {{3, 200, 40}, {}, {1}, 0},           // an outer kept dim (out [3, 40])
        {{300, 50}, {}, {0}, 3},              // strided output
        {{6, 5000}, {}, {0}, 1},              // columns in two chunks
    };
    for (DType dt : {DType::f32, DType::bf16}) {
        for (const Case& c : cases) {
            const TensorDesc in = view(2, dt, c.sizes, c.strides);
            const std::vector<float> x = put_random(in);
            std::vector<int64_t> osz = kept_shape(c.sizes, c.dims);
            TensorDesc out = view(1, dt, osz);
            if (c.out_stride) {
                int64_t n = 1;
                for (int64_t s : osz) n *= s;
                out = view(1, dt, {n}, {c.out_stride});
            }
            for (Reduce op : {Reduce::sum, Reduce::mean, Reduce::max, Reduce::min}) {
                poison(out);
                KernelBuilder kb = builder("column_reduce");
                ops::reduce(kb, op, out, in, c.dims);
                run(kb);
                std::vector<double> ref(out.numel());
                for_each_group(in, x, c.dims, [&](int64_t o, const std::vector<double>& v) { ref[o] = reduce_ref(op, v); });
                const std::vector<float> got = get(out);
                const double n = double(in.numel() / out.numel());
                for (size_t i = 0; i < ref.size(); ++i) {
                    const double tol = dt == DType::bf16 ? 1e-2 * (1 + std::abs(ref[i])) : 1e-6 * (1 + n) * (1 + std::abs(ref[i]));
                    ASSERT_NEAR(got[i], ref[i], tol) << "op " << int(op) << " " << in.str() << " at " << i;
                }
                if (c.out_stride > 1) {   // the elements between outputs are untouched
                    const std::vector<float> st = storage(out);
                    for (size_t i = 0; i < st.size(); ++i) {
                        if (i % c.out_stride == 0) continue;
                        ASSERT_EQ(st[i], round_to(-777.0f, dt)) << in.str() << " storage " << i;
                    }
                }
            }
        }
    }
    // Integer sums accumulate exactly (in fp32) and round to the integer output.
    const TensorDesc in = view(2, DType::i32, {300, 50}), out = view(1, DType::i32, {50});
    std::vector<float> x(in.numel());
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 19) - 9);
    put(in, x);
    KernelBuilder kb = builder("column_sum_i32");
    ops::reduce(kb, Reduce::sum, out, in, {0});
    run(kb);
    std::vector<double> ref(50, 0.0);
    for (size_t i = 0; i < x.size(); ++i) ref[i % 50] += x[i];
    expect_close(get(out), ref, DType::f32, "i32 column sum", 0, 0);
}

// Simulated time of a reduction of a contiguous f32 tensor (timing-only run).
static int64_t reduction_ps(const ChipConfig& chip, Reduce op, const std::vector<int64_t>& in_sizes,
                     const std::vector<int64_t>& dims, const std::vector<int64_t>& out_sizes) {
    KernelBuilder kb(chip, "reduce", 1ull << 30);
    ops::reduce(kb, op, TensorDesc::contiguous(1, DType::f32, out_sizes), TensorDesc::contiguous(2, DType::f32, in_sizes),
                dims);
    Program prog = kb.finish();
    NeuronCore timing(chip, ExecMode::TimingOnly, 1ull << 30);
    const uint64_t args[2] = {64ull << 20, 128ull << 20};
    return timing.run(prog, nullptr, args, 2).duration_ps();
}

TEST_F(OpsReduce, ColumnReductionIsFasterThanElementDmas) {
    // sum over dim 0 of [8192, 768] moves whole rows: its simulated time stays within 1.5x of
    // the sum over dim 1 of the same tensor.
    EXPECT_LT(reduction_ps(chip, Reduce::sum, {8192, 768}, {0}, {768}),
              3 * reduction_ps(chip, Reduce::sum, {8192, 768}, {1}, {8192}) / 2);
}

TEST_F(OpsReduce, TwoByteColumnSumsRunOnTheTensorEngine) {
    // bf16 bias gradients: the rows are summed by matmuls against a column of ones, with no
    // VectorE/GpSimdE accumulation, and the kernel is faster than the fp32 one of the same shape.
    KernelBuilder kb(chip, "reduce", 1ull << 30);
    ops::reduce(kb, Reduce::sum, TensorDesc::contiguous(1, DType::bf16, {2048}),
                TensorDesc::contiguous(2, DType::bf16, {4096, 2048}), {0});
    const Program prog = kb.finish();
    int matmuls = 0, adds = 0;
    for (const Instruction& ins : prog.instrs) {
        matmuls += ins.op == Opcode::nc_matmul;
        adds += ins.op == Opcode::tensor_tensor;
    }
    EXPECT_EQ(matmuls, 4096 / 128 * 2048 / 512);
    EXPECT_EQ(adds, 0);
    NeuronCore timing(chip, ExecMode::TimingOnly, 1ull << 30);
    const uint64_t args[2] = {64ull << 20, 128ull << 20};
    EXPECT_LT(timing.run(prog, nullptr, args, 2).duration_ps(), reduction_ps(chip, Reduce::sum, {4096, 2048}, {0}, {2048}));
}

TEST_F(OpsReduce, WholeTensorReductionUsesAllPartitions) {
    // the mean of all of [8192, 2048] (a loss) reads 128 partitions at a time: its simulated
    // time stays within 1.5x of the sum over dim 1, whose 8192 outputs fill the partitions.
    EXPECT_LT(reduction_ps(chip, Reduce::mean, {8192, 2048}, {0, 1}, {}),
              3 * reduction_ps(chip, Reduce::sum, {8192, 2048}, {1}, {8192}) / 2);
}

TEST_F(OpsReduce, RemovedDimsOutputEmptyAndNegativeDims) {
    const TensorDesc in = view(2, DType::f32, {4, 6, 3});
    std::vector<float> x = put_random(in);
    const TensorDesc out = view(1, DType::f32, {4, 3});   // dim 1 removed
    KernelBuilder kb = builder("sum");
    ops::reduce(kb, Reduce::sum, out, in, {-2});
    run(kb);
    std::vector<double> ref(12);
    for_each_group(in, x, {1}, [&](int64_t o, const std::vector<double>& v) { ref[o] = reduce_ref(Reduce::sum, v); });
    expect_close(get(out), ref, DType::f32, "sum dim -2");

    // Summing an empty dim gives zeros; max of it is an error.
    const TensorDesc empty = view(2, DType::f32, {3, 0}), zeros = view(1, DType::f32, {3});
    poison(zeros);
    KernelBuilder k2 = builder("sum_empty");
    ops::reduce(k2, Reduce::sum, zeros, empty, {1});
    run(k2);
    expect_close(get(zeros), {0, 0, 0}, DType::f32, "empty sum", 0, 0);
    KernelBuilder k3 = builder("max_empty");
    EXPECT_THROW(ops::reduce(k3, Reduce::max, zeros, empty, {1}), ops::OpError);
    EXPECT_THROW(ops::reduce(k3, Reduce::sum, view(1, DType::f32, {5}), in, {1}), ops::OpError);
}

TEST_F(OpsReduce, VarAndStdWithCorrection) {
    for (DType dt : {DType::f32, DType::bf16}) {
        for (auto [sizes, dims] : std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>{
                 {{3, 5, 7}, {2}}, {{3, 5, 7}, {0, 1}}, {{4, 6000}, {1}}, {{257, 3}, {0}}}) {
            const TensorDesc in = view(2, dt, sizes);
            std::vector<float> x = put_random(in, 1.0f, 3.0f);
            for (double corr : {0.0, 1.0}) {
                for (bool sq : {false, true}) {
                    const TensorDesc out = view(1, dt, kept_shape(sizes, dims));
                    KernelBuilder kb = builder("var");
                    ops::var(kb, out, in, dims, corr, sq);
                    run(kb);
                    std::vector<double> ref(out.numel());
                    for_each_group(in, x, dims, [&](int64_t o, const std::vector<double>& v) {
                        double m = 0, s = 0;
                        for (double a : v) m += a;
                        m /= v.size();
                        for (double a : v) s += (a - m) * (a - m);
                        ref[o] = s / (v.size() - corr);
                        if (sq) ref[o] = std::sqrt(ref[o]);
                    });
                    expect_close(get(out), ref, dt, "var", 1e-5, 1e-4);
                }
            }
        }
    }
}

TEST_F(OpsReduce, MaxMinWithIndicesFirstOccurrenceAndNaN) {
    for (DType dt : {DType::f32, DType::bf16}) {
        for (auto [sizes, dim] : std::vector<std::pair<std::vector<int64_t>, int64_t>>{
                 {{3, 5, 7}, 2}, {{3, 5, 7}, 1}, {{130, 40}, 0}, {{2, 9001}, 1}, {{5}, 0}}) {
            const TensorDesc in = view(3, dt, sizes);
            std::vector<float> x = put_random(in);
            // Ties: copy the first element of each row into a later position; one NaN row.
            for (size_t i = 0; i + 4 < x.size(); i += 11) x[i + 4] = x[i];
            if (x.size() > 40) x[37] = NAN;
            put(in, x);
            for (Reduce op : {Reduce::max, Reduce::min}) {
                std::vector<int64_t> osz = sizes;
                osz.erase(osz.begin() + dim);
                const TensorDesc vals = view(1, dt, osz), idx = view(2, DType::i32, osz);
                KernelBuilder kb = builder("argmax");
                ops::reduce_with_indices(kb, op, &vals, &idx, in, dim);
                run(kb);
                const std::vector<float> gv = get(vals), gi = get(idx);
                int64_t o = 0;
                for_each_group(in, x, {dim}, [&](int64_t, const std::vector<double>& v) {
                    size_t best = 0;
                    for (size_t i = 1; i < v.size(); ++i) {
                        if (std::isnan(v[best])) break;
                        if (std::isnan(v[i]) || (op == Reduce::max ? v[i] > v[best] : v[i] < v[best])) best = i;
                    }
                    ASSERT_EQ(gi[o], float(best)) << in.str() << " op " << int(op) << " row " << o;
                    if (std::isnan(v[best])) ASSERT_TRUE(std::isnan(gv[o]));
                    else ASSERT_EQ(gv[o], float(v[best]));
                    ++o;
                });
            }
        }
    }
}
