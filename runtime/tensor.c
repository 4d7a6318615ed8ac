/* Generic DLPack tensor checks shared by the kernel families. Messages name the argument and say
 * what was expected and what came. */
#include <stdio.h>
#include <string.h>

#include "runtime/internal.h"

const char *mla__dtype_name(DLDataType dt, char *buf, size_t size) {
    const char *base = "?";
    switch (dt.code) {
    case kDLInt: base = "int"; break;
    case kDLUInt: base = "uint"; break;
    case kDLFloat: base = "float"; break;
    case kDLBfloat: base = "bfloat"; break;
    case MLA_DL_FLOAT8_E4M3FN: snprintf(buf, size, "float8_e4m3fn"); return buf;
    case MLA_DL_FLOAT8_E5M2: snprintf(buf, size, "float8_e5m2"); return buf;
    case MLA_DL_FLOAT4_E2M1FN: snprintf(buf, size, "float4_e2m1fn"); return buf;
    default: snprintf(buf, size, "dtype(code %u, %u bits)", dt.code, dt.bits); return buf;
    }
    if (dt.lanes > 1)
        snprintf(buf, size, "%s%ux%u", base, dt.bits, dt.lanes);
    else
        snprintf(buf, size, "%s%u", base, dt.bits);
    return buf;
}

static int dtype_is(DLDataType dt, uint8_t code, uint8_t bits) {
    return dt.code == code && dt.bits == bits && dt.lanes == 1;
}

static int dtype_ok(DLDataType dt, mla__dtype want) {
    switch (want) {
    case MLA_DT_INT32: return dtype_is(dt, kDLInt, 32);
    case MLA_DT_UINT8: return dtype_is(dt, kDLUInt, 8);
    case MLA_DT_FP8_E4M3: return dtype_is(dt, MLA_DL_FLOAT8_E4M3FN, 8) || dtype_is(dt, kDLUInt, 8);
    case MLA_DT_BF16: return dtype_is(dt, kDLBfloat, 16);
    case MLA_DT_FP32: return dtype_is(dt, kDLFloat, 32);
    case MLA_DT_BF16_OR_FP16: return dtype_is(dt, kDLBfloat, 16) || dtype_is(dt, kDLFloat, 16);
    }
    return 0;
}

static const char *want_name(mla__dtype want) {
    static const char *const names[] = {"int32", "uint8", "float8_e4m3fn (or uint8)", "bfloat16",
                                        "float32", "bfloat16 or float16"};
    return names[want];
}

mla_status mla__check_tensor(const mla_runtime *rt, const DLTensor *t, const char *name,
                             mla__dtype dtype, int ndim) {
    char buf[64];
    MLA_ARG_CHECK(t != NULL, "%s: expected a tensor, got NULL", name);
    MLA_ARG_CHECK(t->device.device_type == kDLCUDA, "%s: expected a CUDA tensor (device type %d), "
                  "got device type %d", name, (int)kDLCUDA, (int)t->device.device_type);
    MLA_ARG_CHECK(!rt || t->device.device_id == rt->options.device, "%s: expected CUDA device %d "
                  "(the runtime's), got device %d", name, rt ? rt->options.device : 0,
                  t->device.device_id);
    MLA_ARG_CHECK(dtype_ok(t->dtype, dtype), "%s: expected dtype %s, got %s", name,
                  want_name(dtype), mla__dtype_name(t->dtype, buf, sizeof buf));
    MLA_ARG_CHECK(t->ndim == ndim, "%s: expected %d dimensions, got %d", name, ndim, t->ndim);
    MLA_ARG_CHECK(t->shape != NULL, "%s: shape is NULL", name);
    for (int d = 0; d < ndim; d++)
        MLA_ARG_CHECK(t->shape[d] >= 0, "%s: shape[%d] is negative (%lld)", name, d,
                      (long long)t->shape[d]);
    MLA_ARG_CHECK(t->data != NULL || t->byte_offset != 0 || mla__numel(t) == 0,
                  "%s: data pointer is NULL", name);
    return MLA_OK;
}

int64_t mla__numel(const DLTensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

mla_status mla__check_dim(const DLTensor *t, const char *name, int d, int64_t want,
                          const char *what) {
    MLA_ARG_CHECK(t->shape[d] == want, "%s: expected shape[%d] == %lld (%s), got %lld", name, d,
                  (long long)want, what, (long long)t->shape[d]);
    return MLA_OK;
}

int64_t mla__stride(const DLTensor *t, int d) {
    if (t->strides) return t->strides[d];
    int64_t s = 1;
    for (int i = t->ndim - 1; i > d; i--) s *= t->shape[i];
    return s;
}

mla_status mla__check_contiguous(const DLTensor *t, const char *name) {
    if (!t->strides) return MLA_OK;
    int64_t want = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        MLA_ARG_CHECK(t->shape[d] == 1 || t->strides[d] == want,
                      "%s: expected a contiguous tensor (stride[%d] == %lld), got stride %lld",
                      name, d, (long long)want, (long long)t->strides[d]);
        want *= t->shape[d];
    }
    return MLA_OK;
}

mla_status mla__check_align(const DLTensor *t, const char *name, unsigned align) {
    uintptr_t p = (uintptr_t)mla__data(t);
    MLA_ARG_CHECK(p % align == 0, "%s: expected a %u-byte aligned data address, got 0x%llx", name,
                  align, (unsigned long long)p);
    return MLA_OK;
}
