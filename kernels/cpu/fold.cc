#include "kernels/cpu/fold.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "dtensor/core/error.h"
#include "kernels/device_dispatch.h"

namespace dtensor::kernels {
namespace {

// Calls f(image offset within a channel plane, column offset within a channel's k_h k_w rows) for
// every (kernel tap, block) pair whose image position is inside the unpadded image, over the blocks
// [first, first + count) of the row-major block grid (the columns held: count per row): the one
// index relation both kernels share.
template <typename F>
void taps(int64_t h, int64_t w, std::array<int64_t, 2> blocks, const FoldParams& p, int64_t first, int64_t count,
          F&& f) {
  for (int64_t i = 0; i < p.kernel[0]; ++i)
    for (int64_t j = 0; j < p.kernel[1]; ++j) {
      const int64_t row = (i * p.kernel[1] + j) * count;
      for (int64_t b = first; b < first + count; ++b) {
        const int64_t oh = b / blocks[1], ow = b % blocks[1];
        const int64_t ih = oh * p.stride[0] - p.padding[0] + i * p.dilation[0];
        const int64_t iw = ow * p.stride[1] - p.padding[1] + j * p.dilation[1];
        if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
        f(ih * w + iw, row + b - first);
      }
    }
}

void check_floating(const char* op, const Tensor& t) {
  DT_CHECK(is_floating(t.dtype()), op, ": input is ", dtype_name(t.dtype()),
           "; accepted: float32, float64, float16, bfloat16");
}

}  // namespace

std::array<int64_t, 2> fold_blocks(const char* op, int64_t h, int64_t w, const FoldParams& p) {
  std::array<int64_t, 2> blocks{};
  const int64_t in[2] = {h, w};
  for (int k = 0; k < 2; ++k) {
    DT_CHECK(p.kernel[k] >= 1 && p.dilation[k] >= 1 && p.stride[k] >= 1 && p.padding[k] >= 0, op,
             ": kernel_size, dilation and stride must be >= 1 and padding >= 0");
    blocks[k] = (in[k] + 2 * p.padding[k] - p.dilation[k] * (p.kernel[k] - 1) - 1) / p.stride[k] + 1;
    DT_CHECK(in[k] + 2 * p.padding[k] - p.dilation[k] * (p.kernel[k] - 1) - 1 >= 0 && blocks[k] >= 1, op,
             ": the kernel (dilated) does not fit the padded image [", h, ", ", w, "]");
  }
  return blocks;
}

Tensor im2col(const Tensor& x, const FoldParams& p) {
  DT_KERNEL_HOST_ONLY(im2col, x, p);
  check_floating("im2col", x);
  DT_CHECK(x.dim() == 3 || x.dim() == 4, "im2col: input ", shape_str(x.sizes()), "; accepted: [N, C, H, W] or [C, H, W]");
  const Tensor x4 = x.dim() == 3 ? x.unsqueeze(0) : x;
  const int64_t n = x4.size(0), c = x4.size(1), h = x4.size(2), w = x4.size(3);
  const auto blocks = fold_blocks("im2col", h, w, p);
  const int64_t k = p.kernel[0] * p.kernel[1], L = blocks[0] * blocks[1];
  const Tensor xd = x4.to(DType::kFloat64).contiguous();
  Tensor cols = Tensor::zeros({n, c * k, L}, DType::kFloat64);
  const double* xp = xd.data<double>();
  double* cp = cols.data<double>();
  for (int64_t plane = 0; plane < n * c; ++plane)
    taps(h, w, blocks, p, 0, L, [&](int64_t xi, int64_t ci) { cp[plane * k * L + ci] = xp[plane * h * w + xi]; });
  const Tensor out = cols.to(x.dtype());
  return x.dim() == 3 ? out.squeeze(0) : out;
}

Tensor col2im(const Tensor& cols, std::array<int64_t, 2> output_size, const FoldParams& p, int64_t first_block) {
  DT_KERNEL_HOST_ONLY(col2im, cols, output_size, p, first_block);
  check_floating("col2im", cols);
  DT_CHECK(cols.dim() == 2 || cols.dim() == 3, "col2im: input ", shape_str(cols.sizes()),
           "; accepted: [N, C * kernel_h * kernel_w, L] or [C * kernel_h * kernel_w, L]");
  const Tensor c3 = cols.dim() == 2 ? cols.unsqueeze(0) : cols;
  const int64_t h = output_size[0], w = output_size[1];
  DT_CHECK(h >= 1 && w >= 1, "col2im: output_size [", h, ", ", w, "]; accepted: positive sizes");
  const auto blocks = fold_blocks("col2im", h, w, p);
  const int64_t k = p.kernel[0] * p.kernel[1], L = blocks[0] * blocks[1];
  DT_CHECK(c3.size(1) % k == 0, "col2im: input dim -2 is ", c3.size(1), "; accepted: a multiple of kernel_h * kernel_w = ", k);
  const int64_t held = c3.size(2);
  DT_CHECK(first_block < 0 ? held == L : first_block + held <= L, "col2im: input has ", held, " blocks",
           first_block < 0 ? std::string() : absl::StrCat(" from block ", first_block), "; output_size [", h, ", ", w,
           "] with these parameters has ", L);
  const int64_t n = c3.size(0), c = c3.size(1) / k;
  const Tensor cd = c3.to(DType::kFloat64).contiguous();
  Tensor img = Tensor::zeros({n, c, h, w}, DType::kFloat64);
  const double* cp = cd.data<double>();
  double* ip = img.data<double>();
  for (int64_t plane = 0; plane < n * c; ++plane)
    taps(h, w, blocks, p, std::max<int64_t>(first_block, 0), held,
         [&](int64_t xi, int64_t ci) { ip[plane * h * w + xi] += cp[plane * k * held + ci]; });
  const Tensor out = img.to(cols.dtype());
  return cols.dim() == 2 ? out.squeeze(0) : out;
}

}  // namespace dtensor::kernels
