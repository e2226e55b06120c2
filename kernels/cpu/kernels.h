// All local CPU reference kernels (namespace dtensor::kernels).
#pragma once

#include "kernels/cpu/embedding.h"
#include "kernels/cpu/loss.h"
#include "kernels/cpu/grouped_mm.h"
#include "kernels/cpu/matrix.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/pointwise.h"
#include "kernels/cpu/pointwise_rows.h"
#include "kernels/cpu/reduction.h"
#include "kernels/cpu/view.h"
#include "kernels/cpu/pooling.h"
#include "kernels/cpu/scan.h"
#include "kernels/cpu/selection.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_merge.h"
#include "kernels/cpu/flex_attention.h"
#include "kernels/cpu/backward.h"
