/* Kernel kinds and their specializations. A spec is the kernel kind plus its integer parameters
 * in the kind's fixed order; everything else of a call is a run-time argument. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "runtime/dsv4_kinds.h"
#include "runtime/fakequant_kinds.h"
#include "runtime/flashmla_kinds.h"
#include "runtime/flashmla_sparse.h"
#include "runtime/internal.h"

static const char *const no_params[] = {NULL};
static const char *const fakequant_qdq_params[] = {"in_dtype", "mode", NULL};
static const char *const fakequant_decode_params[] = {"cache_dtype", "k_qdq", "v_qdq", "p_qdq", NULL};
static const char *const fakequant_decode_sm90_params[] = {"cache_dtype", "k_qdq", "v_qdq", "p_qdq",
                                                           "q_fp32", NULL};
static const char *const fakequant_combine_params[] = {"out_dtype", NULL};
static const char *const fakequant_prefill_params[] = {"dtype", "q_quant", "k_quant", "p_quant",
                                                       "v_quant", "sparsity_m", NULL};
static const char *const fakequant_prefill_mma_params[] = {"dtype", "q_quant", "k_quant",
                                                           "p_quant", "v_quant", "sparsity_m",
                                                           "dqk", "dv", "warps",
                                                           "rows_per_warp", NULL};
static const char *const fakequant_prefill_sm90_params[] = {"dtype", "q_quant", "k_quant",
                                                            "p_quant", "v_quant", "sparsity_m",
                                                            "dqk", "dv", NULL};
static const char *const dsv4_attention_params[] = {"H", "page_size", "draft_tokens", "hca", NULL};
static const char *const dsv4_output_proj_params[] = {"H", "G", NULL};
static const char *const dsv4_output_proj_stream_params[] = {"H", "G", "NT", NULL};
static const char *const flashmla_decode_params[] = {"kv_dtype", "page_class", "causal", NULL};
static const char *const flashmla_decode_x2_params[] = {"kv_dtype", NULL};
static const char *const flashmla_combine_params[] = {"out_dtype", NULL};
static const char *const flashmla_sparse_prefill_params[] = {"d_qk", NULL};

static const mla__kernel_kind kinds[] = {
    {"dsv4_attention_plan", "dsv4/plan.cu", no_params, mla__dsv4_plan_build},
    {"dsv4_attention", "dsv4/attention.cu", dsv4_attention_params, mla__dsv4_attention_build},
    {"dsv4_output_proj_a", "dsv4/output_proj.cu", dsv4_output_proj_params,
     mla__dsv4_output_proj_a_build},
    {"dsv4_output_proj_b", "dsv4/output_proj.cu", dsv4_output_proj_params,
     mla__dsv4_output_proj_b_build},
    {"dsv4_output_proj_a_stream", "dsv4/output_proj.cu", dsv4_output_proj_stream_params,
     mla__dsv4_output_proj_a_stream_build},
    {"dsv4_output_proj_b_stream", "dsv4/output_proj.cu", dsv4_output_proj_stream_params,
     mla__dsv4_output_proj_b_stream_build},
    {"dsv4_output_proj_stream", "dsv4/output_proj.cu", dsv4_output_proj_stream_params,
     mla__dsv4_output_proj_stream_build},
    {"flashmla_metadata", "flashmla/metadata.cu", no_params, mla__flashmla_metadata_build},
    {"flashmla_decode", "flashmla/decode.cu", flashmla_decode_params, mla__flashmla_decode_build},
    {"flashmla_decode_sm90", "flashmla/decode_sm90.cu", flashmla_decode_params,
     mla__flashmla_decode_sm90_build, "sm_90a"},
    {"flashmla_decode_sm90x2", "flashmla/decode_sm90x2.cu", flashmla_decode_x2_params,
     mla__flashmla_decode_sm90x2_build, "sm_90a"},
    {"flashmla_combine", "flashmla/combine.cu", flashmla_combine_params,
     mla__flashmla_combine_build},
    {"flashmla_sparse_decode", "flashmla/sparse_decode.cu", no_params,
     mla__flashmla_sparse_fixed_build},
    {"flashmla_sparse_prefill", "flashmla/sparse_prefill.cu", flashmla_sparse_prefill_params,
     mla__flashmla_sparse_prefill_build},
    {"flashmla_sparse_decode_sm90", "flashmla/sparse_decode_sm90.cu", no_params,
     mla__flashmla_sparse_fixed_build, "sm_90a"},
    {"flashmla_sparse_decode_sm90x2", "flashmla/sparse_decode_sm90.cu", no_params,
     mla__flashmla_sparse_fixed_build, "sm_90a"},
    {"flashmla_sparse_decode_sm90x2c", "flashmla/sparse_decode_sm90.cu", no_params,
     mla__flashmla_sparse_fixed_build, "sm_90a"},
    {"flashmla_sparse_decode_sm90ws", "flashmla/sparse_decode_sm90.cu", no_params,
     mla__flashmla_sparse_fixed_build, "sm_90a"},
    {"flashmla_sparse_prefill_sm90", "flashmla/sparse_prefill_sm90.cu", no_params,
     mla__flashmla_sparse_fixed_build, "sm_90a"},
    {"flashmla_sparse_prefill_sm90pp", "flashmla/sparse_prefill_sm90.cu", no_params,
     mla__flashmla_sparse_fixed_build, "sm_90a"},
    {"fakequant_qdq", "fakequant/qdq.cu", fakequant_qdq_params, mla__fakequant_qdq_build},
    {"fakequant_decode", "fakequant/decode.cu", fakequant_decode_params,
     mla__fakequant_decode_build},
    {"fakequant_decode_mma", "fakequant/decode_mma.cu", fakequant_decode_params,
     mla__fakequant_decode_mma_build},
    {"fakequant_decode_sm90", "fakequant/decode_sm90.cu", fakequant_decode_sm90_params,
     mla__fakequant_decode_sm90_build, "sm_90a"},
    {"fakequant_decode_dense", "flashmla/decode_sm90.cu", fakequant_decode_params,
     mla__fakequant_decode_dense_build, "sm_90a"},
    {"fakequant_decode_combine", "fakequant/decode.cu", fakequant_combine_params,
     mla__fakequant_combine_build},
    {"fakequant_dense_combine", "flashmla/combine.cu", flashmla_combine_params,
     mla__flashmla_combine_build},
    {"fakequant_prefill", "fakequant/prefill.cu", fakequant_prefill_params,
     mla__fakequant_prefill_build},
    {"fakequant_prefill_mma", "fakequant/prefill_mma.cu", fakequant_prefill_mma_params,
     mla__fakequant_prefill_mma_build},
    {"fakequant_prefill_sm90", "fakequant/prefill_sm90.cu", fakequant_prefill_sm90_params,
     mla__fakequant_prefill_sm90_build, "sm_90a"},
};

const mla__kernel_kind *mla__kernel_kinds(int *count) {
    *count = (int)(sizeof kinds / sizeof kinds[0]);
    return kinds;
}

const mla__kernel_kind *mla__kernel_kind_find(const char *name) {
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (strcmp(kinds[i].name, name) == 0) return &kinds[i];
    return NULL;
}

void mla__spec_init(mla__spec *spec, const char *kernel) {
    memset(spec, 0, sizeof *spec);
    snprintf(spec->kernel, sizeof spec->kernel, "%s", kernel);
}

mla_status mla__spec_add(mla__spec *spec, const char *name, long long value) {
    MLA_RETURN_ERROR_IF(spec->n_params == MLA_SPEC_MAX_PARAMS, MLA_ERR_INTERNAL,
                        "spec %s: more than %d parameters", spec->kernel, MLA_SPEC_MAX_PARAMS);
    mla__param *p = &spec->params[spec->n_params++];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->value = value;
    return MLA_OK;
}

/* Reads one integer field of a spec object. */
static mla_status json_param(const cJSON *obj, const char *kernel, const char *name,
                             long long *value) {
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(obj, name);
    MLA_ARG_CHECK(item != NULL, "spec %s: missing parameter \"%s\"", kernel, name);
    MLA_ARG_CHECK(cJSON_IsNumber(item) && item->valuedouble == (double)(long long)item->valuedouble,
                  "spec %s: parameter \"%s\" must be an integer", kernel, name);
    *value = (long long)item->valuedouble;
    return MLA_OK;
}

mla_status mla__spec_from_json(const void *cjson_object, mla__spec *spec) {
    const cJSON *obj = cjson_object;
    MLA_ARG_CHECK(cJSON_IsObject(obj), "spec: expected a JSON object");
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(obj, "kernel");
    MLA_ARG_CHECK(cJSON_IsString(k), "spec: expected a string field \"kernel\"");
    const mla__kernel_kind *kind = mla__kernel_kind_find(k->valuestring);
    MLA_ARG_CHECK(kind != NULL, "spec: unknown kernel \"%s\"", k->valuestring);
    mla__spec_init(spec, kind->name);
    int n_fields = 0;
    for (const cJSON *c = obj->child; c; c = c->next) n_fields++;
    for (int i = 0; kind->params[i]; i++) {
        long long v = 0;
        MLA_FORWARD_IF_ERROR(json_param(obj, kind->name, kind->params[i], &v));
        MLA_FORWARD_IF_ERROR(mla__spec_add(spec, kind->params[i], v));
    }
    MLA_ARG_CHECK(n_fields == spec->n_params + 1, "spec %s: unknown fields (expected \"kernel\" "
                  "and its %d parameters)", kind->name, spec->n_params);
    char name_expr[256];
    mla__launch_info launch;
    return kind->build(spec, name_expr, sizeof name_expr, &launch); /* validates the values */
}

void mla__spec_describe(const mla__spec *spec, char *out, size_t size) {
    size_t used = (size_t)snprintf(out, size, "%s(", spec->kernel);
    for (int i = 0; i < spec->n_params && used < size; i++)
        used += (size_t)snprintf(out + used, size - used, "%s%s=%lld", i ? "," : "",
                                 spec->params[i].name, spec->params[i].value);
    if (used < size) snprintf(out + used, size - used, ")");
}
