// Which OpenBLAS kernels run, and the CPU they should be for.
//
// Debian 12's OpenBLAS (0.3.21, DYNAMIC_ARCH) picks its kernels once, when the library loads, from
// the CPU model: a CPU newer than the release (e.g. family 6 model 207, on this project's VMs)
// falls back to "Prescott", the SSE3 kernels, though the CPU has AVX-512: sgemm about 3x slower
// (measured: an 8-layer dim-512 GPT step 300 against 860 tokens/s). The library reads
// $OPENBLAS_CORETYPE at load time, before main, so the fix is the environment of a fresh process.
#pragma once

#include <string>

namespace dtensor::kernels {

// The loaded OpenBLAS's kernel name ("Prescott", "SkylakeX", "Haswell", ...).
std::string blas_core_name();

// The OPENBLAS_CORETYPE that matches this CPU's features where the loaded kernels are the generic
// fallback ("Prescott" or "Core2") on a CPU with AVX2/FMA ("Haswell") or AVX-512 F/BW/VL
// ("SkylakeX"); "" when the kernels already fit or $OPENBLAS_CORETYPE is set (the user's choice).
std::string better_blas_core();

}  // namespace dtensor::kernels
