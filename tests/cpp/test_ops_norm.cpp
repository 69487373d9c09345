// Softmax, log_softmax, layer_norm and rms_norm kernels (forward and backward)
// match double-precision references on the functional simulator: short rows
// packed several per partition, long rows in chunks, non-last dims, strided
// views, f32 and bf16.
#include "ops_test_util.h"

using namespace trnsim;
using namespace trnsim::ops_test;

namespace {

class OpsNorm : public ::testing::Test, public OpsHarness {};

// Row-major positions of the rows along 'dim' of 'sizes': calls fn(list of logical indices).
void for_each_row(const std::vector<int64_t>& sizes, int64_t dim, const std::function<void(const std::vector<int64_t>&)>& fn) {
    std::vector<int64_t> outer = sizes;
    outer[dim] = 1;
    std::vector<int64_t> strides(sizes.size(), 1);
    for (int64_t d = int64_t(sizes.size()) - 2; d >= 0; --d) strides[d] = strides[d + 1] * sizes[d + 1];
    for_each_index(outer, [&](const std::vector<int64_t>& idx) {
        int64_t base = 0;
        for (size_t d = 0; d < idx.size(); ++d) base += idx[d] * strides[d];
        std::vector<int64_t> row;
        for (int64_t i = 0; i < sizes[dim]; ++i) row.push_back(base + i * strides[dim]);
        fn(row);
    });
}

struct SoftmaxCase {
    std::vector<int64_t> sizes;
    int64_t dim;
};
const std::vector<SoftmaxCase> kSoftmaxCases = {
    {{3, 5, 7}, 2}, {{3, 5, 7}, 1}, {{130, 257}, 1}, {{2, 9000}, 1}, {{1}, 0}, {{700, 6}, -1}, {{4, 3}, 0},
};

}  // namespace

TEST_F(OpsNorm, SoftmaxAndLogSoftmaxForward) {
    for (DType dt : {DType::f32, DType::bf16}) {
        for (const SoftmaxCase& c : kSoftmaxCases) {
            for (bool log : {false, true}) {
                const TensorDesc in = view(2, dt, c.sizes), out = view(1, dt, c.sizes);
                std::vector<float> x = put_random(in, -8.0f, 8.0f);
                KernelBuilder kb = builder("softmax");
                ops::softmax(kb, out, in, c.dim, log);
                run(kb);
                const int64_t dim = c.dim < 0 ? c.dim + int64_t(c.sizes.size()) : c.dim;
                std::vector<double> ref(x.size());
                for_each_row(c.sizes, dim, [&](const std::vector<int64_t>& row) {
                    double m = -INFINITY, s = 0;
                    for (int64_t i : row) m = std::max<double>(m, x[i]);
                    for (int64_t i : row) s += std::exp(x[i] - m);
                    for (int64_t i : row) ref[i] = log ? x[i] - m - std::log(s) : std::exp(x[i] - m) / s;
                });
                expect_close(get(out), ref, dt, (std::string(log ? "log_softmax " : "softmax ") + in.str()).c_str(),
                             1e-6, 1e-5);
            }
        }
    }
}

TEST_F(OpsNorm, SoftmaxBackwardBothForms) {
    for (DType dt : {DType::f32, DType::bf16}) {
        for (const SoftmaxCase& c : kSoftmaxCases) {
            for (bool log : {false, true}) {
                const TensorDesc g = view(2, dt, c.sizes), y = view(3, dt, c.sizes), gi = view(1, dt, c.sizes);
                std::vector<float> gv = put_random(g);
                std::vector<float> yv = log ? put_random(y, -6.0f, -0.1f) : put_random(y, 0.0f, 1.0f);
                KernelBuilder kb = builder("softmax_bwd");
                ops::softmax_backward(kb, gi, g, y, c.dim, log);
                run(kb);
                const int64_t dim = c.dim < 0 ? c.dim + int64_t(c.sizes.size()) : c.dim;
                std::vector<double> ref(gv.size());
                for_each_row(c.sizes, dim, [&](const std::vector<int64_t>& row) {
                    double s = 0;
                    for (int64_t i : row) s += log ? gv[i] : double(gv[i]) * yv[i];
                    for (int64_t i : row) ref[i] = log ? gv[i] - std::exp(double(yv[i])) * s : yv[i] * (gv[i] - s);
                });
                const double scale = std::sqrt(double(c.sizes[dim]));
                expect_close(get(gi), ref, dt, "softmax_backward", 1e-5 * scale, 1e-5);
            }
        }
    }
}

TEST_F(OpsNorm, SoftmaxOfStridedInput) {
    // Softmax over dim 0 of a transposed [40, 30] view.
    const TensorDesc in = view(2, DType::f32, {40, 30}, {1, 40}), out = view(1, DType::f32, {40, 30});
    std::vector<float> x = put_random(in);
    KernelBuilder kb = builder("softmax");
    ops::softmax(kb, out, in, 0);
    run(kb);
    const std::vector<float> lx = logical(in, x);
    std::vector<double> ref(lx.size());
    for_each_row({40, 30}, 0, [&](const std::vector<int64_t>& row) {
        double m = -INFINITY, s = 0;
        for (int64_t i : row) m = std::max<double>(m, lx[i]);
        for (int64_t i : row) s += std::exp(lx[i] - m);
        for (int64_t i : row) ref[i] = std::exp(lx[i] - m) / s;
    });
    expect_close(get(out), ref, DType::f32, "softmax strided", 1e-6, 1e-5);
}

namespace {

struct NormRef {
    std::vector<double> y, mean, rstd, gx, gw, gb;
};

// rows x D reference for layer norm (rms = false) or rms norm, forward and backward.
NormRef norm_ref(bool rms, const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& b,
                 const std::vector<float>& g, int64_t rows, int64_t D, double eps) {
    NormRef r;
    r.y.resize(rows * D);
    r.gx.resize(rows * D);
    r.gw.assign(D, 0);
    r.gb.assign(D, 0);
    for (int64_t i = 0; i < rows; ++i) {
        const float* xr = &x[i * D];
        double m = 0, v = 0;
        if (!rms) {
            for (int64_t j = 0; j < D; ++j) m += xr[j];
            m /= D;
        }
        for (int64_t j = 0; j < D; ++j) v += (xr[j] - m) * (xr[j] - m);
        const double rs = 1 / std::sqrt(v / D + eps);
        r.mean.push_back(m);
        r.rstd.push_back(rs);
        double a = 0, bsum = 0;
        std::vector<double> xh(D), gw(D);
        for (int64_t j = 0; j < D; ++j) {
            xh[j] = (xr[j] - m) * rs;
            r.y[i * D + j] = xh[j] * (w.empty() ? 1 : w[j]) + (b.empty() ? 0 : b[j]);
            gw[j] = g[i * D + j] * (w.empty() ? 1 : w[j]);
            a += gw[j];
            bsum += gw[j] * xh[j];
            r.gw[j] += g[i * D + j] * xh[j];
            r.gb[j] += g[i * D + j];
        }
        for (int64_t j = 0; j < D; ++j) r.gx[i * D + j] = rs * (gw[j] - (rms ? 0 : a / D) - xh[j] * bsum / D);
    }
    return r;
}

}  // namespace

TEST_F(OpsNorm, LayerNormAndRmsNormForwardBackward) {
    struct Case {
        std::vector<int64_t> sizes;
        int64_t k;   // normalized dims
        bool affine;
    };
    const std::vector<Case> cases = {{{3, 5, 7}, 1, true}, {{3, 5, 7}, 2, false}, {{130, 96}, 1, true},
                                     {{2, 1000}, 1, true}, {{1, 1}, 1, true},     {{300, 3}, 1, true},
                                     // one row per partition, work split across engines
                                     {{130, 768}, 1, false}, {{200, 2048}, 1, true}, {{130, 4096}, 1, true},
                                     // rows longer than one SBUF partition holds: chunked passes
                                     {{3, 10000}, 1, true}, {{2, 3, 3000}, 2, false}, {{130, 6500}, 1, true}};
    for (DType dt : {DType::f32, DType::bf16}) {
        for (const Case& c : cases) {
            for (bool rms : {false, true}) {
                int64_t D = 1;
                std::vector<int64_t> nshape(c.sizes.end() - c.k, c.sizes.end()), stat_shape = c.sizes;
                for (int64_t s : nshape) D *= s;
                for (int64_t i = 0; i < c.k; ++i) stat_shape[stat_shape.size() - 1 - i] = 1;
                const int64_t rows = numel(c.sizes) / D;
                const TensorDesc x = view(2, dt, c.sizes), w = view(3, dt, nshape), b = view(4, dt, nshape);
                const TensorDesc y = view(1, dt, c.sizes), mean = view(5, DType::f32, stat_shape),
                                 rstd = view(6, DType::f32, stat_shape);
                std::vector<float> xv = put_random(x, -2.0f, 3.0f), wv, bv;
                if (c.affine) wv = put_random(w, 0.5f, 1.5f), bv = rms ? std::vector<float>{} : put_random(b);
                const float eps = 1e-5f;
                KernelBuilder kb = builder("norm");
                if (rms) ops::rms_norm(kb, y, &rstd, x, c.affine ? &w : nullptr, c.k, eps);
                else ops::layer_norm(kb, y, &mean, &rstd, x, c.affine ? &w : nullptr, c.affine ? &b : nullptr, c.k, eps);
                run(kb);
                const TensorDesc g = view(7, dt, c.sizes);
                std::vector<float> gv = put_random(g);
                const NormRef ref = norm_ref(rms, xv, wv, bv, gv, rows, D, eps);
                const std::string what = std::string(rms ? "rms_norm " : "layer_norm ") + x.str();
                expect_close(get(y), ref.y, dt, (what + " y").c_str(), 1e-5, 1e-4);
                expect_close(get(rstd), ref.rstd, DType::f32, (what + " rstd").c_str(), 1e-5, 1e-4);
                if (!rms) expect_close(get(mean), ref.mean, DType::f32, (what + " mean").c_str(), 1e-5, 1e-4);

                // Backward from the device's own mean/rstd (as autograd does).
                const TensorDesc gx = view(8, dt, c.sizes), gw = view(9, dt, nshape), gb = view(10, dt, nshape);
                KernelBuilder kb2 = builder("norm_bwd");
                const TensorDesc* wp = c.affine ? &w : nullptr;
                if (rms) ops::rms_norm_backward(kb2, &gx, &gw, g, x, rstd, wp, c.k);
                else ops::layer_norm_backward(kb2, &gx, &gw, &gb, g, x, mean, rstd, wp, c.k);
                run(kb2);
                expect_close(get(gx), ref.gx, dt, (what + " grad_in").c_str(), 1e-4, 1e-4);
                const double sum_tol = 1e-4 * std::sqrt(double(rows));
                expect_close(get(gw), ref.gw, dt, (what + " grad_weight").c_str(), sum_tol, 1e-4);
                if (!rms) expect_close(get(gb), ref.gb, dt, (what + " grad_bias").c_str(), sum_tol, 1e-4);
            }
        }
    }
}

TEST_F(OpsNorm, NormRowTilesInFlightWithAnyGradients) {
    // One row per partition over many row tiles (several in flight at once, the last one partial),
    // each gradient optional; rows longer than one PSUM partition accumulates (5000 columns), and
    // rows whose backward keeps fewer row tiles in flight to fit SBUF (5120 and 5632 columns).
    struct Case {
        std::vector<int64_t> sizes;
        bool affine;
        DType dt;
    };
    const std::vector<Case> cases = {{{700, 1024}, true, DType::bf16},  {{3, 300, 640}, false, DType::f32},
                                     {{150, 5000}, false, DType::bf16}, {{260, 5120}, true, DType::bf16},
                                     {{300, 5632}, true, DType::bf16}};
    for (const Case& c : cases) {
        for (bool rms : {false, true}) {
            const int64_t D = c.sizes.back(), rows = numel(c.sizes) / D;
            std::vector<int64_t> stat_shape = c.sizes;
            stat_shape.back() = 1;
            const TensorDesc x = view(2, c.dt, c.sizes), w = view(3, c.dt, {D}), b = view(4, c.dt, {D});
            const TensorDesc y = view(1, c.dt, c.sizes), mean = view(5, DType::f32, stat_shape),
                             rstd = view(6, DType::f32, stat_shape), g = view(7, c.dt, c.sizes);
            std::vector<float> xv = put_random(x, -2.0f, 3.0f), wv, bv;
            if (c.affine) wv = put_random(w, 0.5f, 1.5f), bv = rms ? std::vector<float>{} : put_random(b);
            const std::vector<float> gv = put_random(g);
            const float eps = 1e-5f;
            const NormRef ref = norm_ref(rms, xv, wv, bv, gv, rows, D, eps);
            const std::string what = std::string(rms ? "rms_norm " : "layer_norm ") + x.str();
            const TensorDesc* wp = c.affine ? &w : nullptr;
            KernelBuilder kb = builder("norm");
            if (rms) ops::rms_norm(kb, y, &rstd, x, wp, 1, eps);
            else ops::layer_norm(kb, y, &mean, &rstd, x, wp, c.affine ? &b : nullptr, 1, eps);
            run(kb);
            expect_close(get(y), ref.y, c.dt, (what + " y").c_str(), 1e-5, 1e-4);
            expect_close(get(rstd), ref.rstd, DType::f32, (what + " rstd").c_str(), 1e-5, 1e-4);
            if (!rms) expect_close(get(mean), ref.mean, DType::f32, (what + " mean").c_str(), 1e-5, 1e-4);

            // grad_in only, the parameter gradients only, all of them.
            for (int wanted : {1, 6, 7}) {
                const TensorDesc gx = view(8, c.dt, c.sizes), gw = view(9, c.dt, {D}), gb = view(10, c.dt, {D});
                const TensorDesc* gxp = wanted & 1 ? &gx : nullptr;
                const TensorDesc* gwp = wanted & 2 ? &gw : nullptr;
                const TensorDesc* gbp = wanted & 4 && !rms ? &gb : nullptr;
                for (const TensorDesc* t : {gxp, gwp, gbp})
                    if (t) poison(*t);
                KernelBuilder kb2 = builder("norm_bwd");
                if (rms) ops::rms_norm_backward(kb2, gxp, gwp, g, x, rstd, wp, 1);
                else ops::layer_norm_backward(kb2, gxp, gwp, gbp, g, x, mean, rstd, wp, 1);
                run(kb2);
                const std::string which = what + " gradients " + std::to_string(wanted);
                if (gxp) expect_close(get(gx), ref.gx, c.dt, (which + " grad_in").c_str(), 1e-4, 1e-4);
                const double sum_tol = 1e-4 * std::sqrt(double(rows));
                if (gwp) expect_close(get(gw), ref.gw, c.dt, (which + " grad_weight").c_str(), sum_tol, 1e-4);
                if (gbp) expect_close(get(gb), ref.gb, c.dt, (which + " grad_bias").c_str(), sum_tol, 1e-4);
            }
        }
    }
}

TEST_F(OpsNorm, NormBackwardAddsTheGradInputAddend) {
    // grad_in = the norm's input gradient + addend on every path: rows grouped several to a
    // partition (96), one per partition and pipelined (1024, 4096 with a partial last tile),
    // chunked (10000); an f32 addend to a bf16 gradient; a transposed (strided) addend.
    struct Case {
        std::vector<int64_t> sizes;
        DType dt, addend_dt;
        bool transposed;
    };
    const std::vector<Case> cases = {
        {{300, 96}, DType::f32, DType::f32, false},    {{300, 96}, DType::bf16, DType::bf16, true},
        {{700, 1024}, DType::bf16, DType::bf16, false}, {{700, 1024}, DType::f32, DType::f32, true},
        {{130, 4096}, DType::bf16, DType::f32, false},  {{3, 10000}, DType::bf16, DType::bf16, false},
        {{3, 10000}, DType::f32, DType::f32, false}};
    for (const Case& c : cases) {
        for (bool rms : {false, true}) {
            const int64_t D = c.sizes.back(), rows = numel(c.sizes) / D;
            ASSERT_EQ(c.sizes.size(), 2u);
            const TensorDesc x = view(2, c.dt, c.sizes), w = view(3, c.dt, {D}), b = view(4, c.dt, {D});
            const TensorDesc y = view(1, c.dt, c.sizes), mean = view(5, DType::f32, {rows, 1}),
                             rstd = view(6, DType::f32, {rows, 1}), g = view(7, c.dt, c.sizes);
            const std::vector<float> xv = put_random(x, -2.0f, 3.0f), wv = put_random(w, 0.5f, 1.5f),
                                     bv = rms ? std::vector<float>{} : put_random(b), gv = put_random(g);
            const float eps = 1e-5f;
            KernelBuilder kb = builder("norm");
            if (rms) ops::rms_norm(kb, y, &rstd, x, &w, 1, eps);
            else ops::layer_norm(kb, y, &mean, &rstd, x, &w, &b, 1, eps);
            run(kb);

            const TensorDesc addend = c.transposed ? view(1, c.addend_dt, c.sizes, {1, rows})
                                                   : view(1, c.addend_dt, c.sizes);
            const std::vector<float> addend_v = logical(addend, put_random(addend, -3.0f, 3.0f));
            NormRef ref = norm_ref(rms, xv, wv, bv, gv, rows, D, eps);
            for (size_t i = 0; i < ref.gx.size(); ++i) ref.gx[i] += addend_v[i];
            const TensorDesc gx = view(8, c.dt, c.sizes), gw = view(9, c.dt, {D}), gb = view(10, c.dt, {D});
            poison(gx);
            KernelBuilder kb2 = builder("norm_bwd");
            if (rms) ops::rms_norm_backward(kb2, &gx, &gw, g, x, rstd, &w, 1, &addend);
            else ops::layer_norm_backward(kb2, &gx, &gw, &gb, g, x, mean, rstd, &w, 1, &addend);
            run(kb2);
            const std::string what = std::string(rms ? "rms_norm " : "layer_norm ") + x.str() + " + " + addend.str();
            expect_close(get(gx), ref.gx, c.dt, (what + " grad_in").c_str(), 1e-4, 1e-4);
            const double sum_tol = 1e-4 * std::sqrt(double(rows));
            expect_close(get(gw), ref.gw, c.dt, (what + " grad_weight").c_str(), sum_tol, 1e-4);
            if (!rms) expect_close(get(gb), ref.gb, c.dt, (what + " grad_bias").c_str(), sum_tol, 1e-4);
        }
    }
    // An addend needs grad_in and the input's shape.
    KernelBuilder kb = builder("norm_bwd");
    const TensorDesc x = view(2, DType::f32, {4, 8}), st = view(3, DType::f32, {4, 1}), gw = view(4, DType::f32, {8});
    const TensorDesc odd = view(5, DType::f32, {4, 4}), gx = view(1, DType::f32, {4, 8});
    EXPECT_THROW(ops::layer_norm_backward(kb, nullptr, &gw, nullptr, x, x, st, st, nullptr, 1, &x), std::exception);
    EXPECT_THROW(ops::layer_norm_backward(kb, &gx, nullptr, nullptr, x, x, st, st, nullptr, 1, &odd), std::exception);
}

TEST_F(OpsNorm, NormVeryLongRowsBuildAndEmptyIsNoop) {
    KernelBuilder big_kb = builder("ln");
    const TensorDesc big = view(2, DType::f32, {2, 1 << 20}), big_out = view(1, DType::f32, {2, 1 << 20});
    const TensorDesc w = view(3, DType::f32, {1 << 20});
    ops::layer_norm(big_kb, big_out, nullptr, nullptr, big, &w, &w, 1, 1e-5f);
    ops::rms_norm_backward(big_kb, &big_out, &w, big, big, view(4, DType::f32, {2, 1}), &w, 1);
    EXPECT_GT(big_kb.size(), 0u);

    KernelBuilder kb = builder("ln");
    const TensorDesc empty = view(2, DType::f32, {0, 8}), empty_out = view(1, DType::f32, {0, 8});
    ops::layer_norm(kb, empty_out, nullptr, nullptr, empty, nullptr, nullptr, 1, 1e-5f);
    ops::softmax(kb, empty_out, empty, 1);
    EXPECT_EQ(kb.size(), 0u);
}
