// im2col and col2im on neuron (nn.functional.unfold and fold, and each other's backward), as data
// movement: im2col stacks the kh * kw strided views of the zero-padded input (copy-kernel DMAs), col2im
// adds each block back into its strided view of a zeroed, padded image (VectorE adds, in fp32) and
// crops the padding. Column c * kh * kw + i * kw + j holds channel c at kernel offset (i, j), as
// PyTorch's.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <vector>

#include "aten/native/util.h"

namespace trnsim::neuron {
namespace {

struct Blocks {
    int64_t kh, kw, dh, dw, ph, pw, sh, sw;
    int64_t oh = 0, ow = 0;   // blocks along H and W
};

// The checks of im2col_shape_check / col2im_shape_check (RuntimeError, as on the CPU).
Blocks blocks(const char* name, at::IntArrayRef k, at::IntArrayRef dil, at::IntArrayRef pad, at::IntArrayRef st,
              int64_t h, int64_t w) {
    TORCH_CHECK(k.size() == 2 && dil.size() == 2 && pad.size() == 2 && st.size() == 2, name,
                ": kernel_size, dilation, padding and stride must have 2 elements each");
    Blocks b{k[0], k[1], dil[0], dil[1], pad[0], pad[1], st[0], st[1]};
    TORCH_CHECK(b.kh > 0 && b.kw > 0, name, ": kernel size should be greater than zero, but got kernel_height: ", b.kh,
                " kernel_width: ", b.kw);
    TORCH_CHECK(b.dh > 0 && b.dw > 0, name, ": dilation should be greater than zero, but got dilation_height: ", b.dh,
                " dilation_width: ", b.dw);
    TORCH_CHECK(b.ph >= 0 && b.pw >= 0, name, ": padding should be non-negative, but got pad_height: ", b.ph,
                " pad_width: ", b.pw);
    TORCH_CHECK(b.sh > 0 && b.sw > 0, name, ": stride should be greater than zero, but got stride_height: ", b.sh,
                " stride_width: ", b.sw);
    b.oh = (h + 2 * b.ph - (b.dh * (b.kh - 1) + 1)) / b.sh + 1;
    b.ow = (w + 2 * b.pw - (b.dw * (b.kw - 1) + 1)) / b.sw + 1;
    TORCH_CHECK(b.oh >= 1 && b.ow >= 1, name, ": given input with spatial size (", h, ", ", w,
                "), the calculated shape of the array of sliding blocks is (", b.oh, ", ", b.ow,
                "), but its components must be at least one");
    return b;
}

// The view of the padded image that kernel offset (i, j) reads over all blocks.
at::Tensor offset_view(const at::Tensor& padded, const Blocks& b, int64_t i, int64_t j) {
    const int64_t r = i * b.dh, c = j * b.dw;
    return padded.slice(2, r, r + b.sh * (b.oh - 1) + 1, b.sh).slice(3, c, c + b.sw * (b.ow - 1) + 1, b.sw);
}

at::Tensor im2col(const at::Tensor& self, at::IntArrayRef k, at::IntArrayRef dil, at::IntArrayRef pad,
                  at::IntArrayRef st) {
    if (!float_tensors({&self}) || (self.dim() != 3 && self.dim() != 4))
        return run_fallback<at::_ops::im2col>(self, k, dil, pad, st);
    const bool batched = self.dim() == 4;
    const at::Tensor x = batched ? self : self.unsqueeze(0);
    TORCH_CHECK(x.size(1) > 0 && x.size(2) > 0 && x.size(3) > 0,
                "im2col: expected non-empty 3D or 4D input tensor, but got input of size ", self.sizes());
    const Blocks b = blocks("im2col", k, dil, pad, st, x.size(2), x.size(3));
    const int64_t n = x.size(0), c = x.size(1);
    at::Tensor out;
    if (x.numel() == 0) {
        out = at::empty({n, c * b.kh * b.kw, b.oh * b.ow}, x.options());
    } else {
        const at::Tensor padded = b.ph || b.pw ? at::constant_pad_nd(x, {b.pw, b.pw, b.ph, b.ph}, 0) : x;
        std::vector<at::Tensor> views;
        for (int64_t i = 0; i < b.kh; ++i)
            for (int64_t j = 0; j < b.kw; ++j) views.push_back(offset_view(padded, b, i, j));
        out = at::stack(views, 2).reshape({n, c * b.kh * b.kw, b.oh * b.ow});
    }
    return batched ? out : out.squeeze(0);
}

at::Tensor col2im(const at::Tensor& self, c10::SymIntArrayRef output_size, at::IntArrayRef k, at::IntArrayRef dil,
                  at::IntArrayRef pad, at::IntArrayRef st) {
    if (!float_tensors({&self}) || (self.dim() != 2 && self.dim() != 3) || output_size.size() != 2)
        return run_fallback_symint<at::_ops::col2im>(self, output_size, k, dil, pad, st);
    const bool batched = self.dim() == 3;
    const at::Tensor x = batched ? self : self.unsqueeze(0);
    const int64_t h = output_size[0].expect_int(), w = output_size[1].expect_int();
    const Blocks b = blocks("col2im", k, dil, pad, st, h, w);
    const int64_t n = x.size(0), ck = x.size(1), l = x.size(2), kk = b.kh * b.kw;
    TORCH_CHECK(ck > 0 && l > 0 && ck % kk == 0, "col2im: expected size of input's dimension 1 to be divisible by the "
                "product of kernel_size, but got input.size(1)=", ck, " and kernel_size=(", b.kh, ", ", b.kw, ")");
    TORCH_CHECK(l == b.oh * b.ow, "col2im: given output_size=(", h, ", ", w, "), kernel_size=(", b.kh, ", ", b.kw,
                "), dilation=(", b.dh, ", ", b.dw, "), padding=(", b.ph, ", ", b.pw, "), stride=(", b.sh, ", ", b.sw,
                "), expected size of input's dimension 2 to match the calculated number of sliding blocks ", b.oh,
                " * ", b.ow, " = ", b.oh * b.ow, ", but got input.size(2)=", l);
    const int64_t c = ck / kk;
    at::Tensor padded = at::zeros({n, c, h + 2 * b.ph, w + 2 * b.pw}, x.options().dtype(at::kFloat));
    if (x.numel() > 0) {
        const at::Tensor cols = x.reshape({n, c, kk, b.oh, b.ow});
        for (int64_t i = 0; i < b.kh; ++i)
            for (int64_t j = 0; j < b.kw; ++j) offset_view(padded, b, i, j).add_(cols.select(2, i * b.kw + j));
    }
    at::Tensor out = padded.slice(2, b.ph, b.ph + h).slice(3, b.pw, b.pw + w).to(self.scalar_type()).contiguous();
    return batched ? out : out.squeeze(0);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("im2col", im2col);
    m.impl("col2im", col2im);
}

}  // namespace trnsim::neuron
