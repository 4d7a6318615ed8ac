/* Built-in precompile presets: named spec lists (see docs/CLI.md). A preset lists every
 * specialization a deployment calls, so `mlajit precompile --preset NAME` leaves nothing to
 * compile at serving time. Each spec is one line: a JSON object in the --spec file format. */
#include <stdlib.h>
#include <string.h>

#include "tools/cli.h"

/* DeepSeek-V4-Flash serving: H=4096, kv_cache page sizes 128 and 256, draft_tokens 0..3, SWA and
 * HCA layers. It holds the kernels that exist today and grows as kernels land. */
static const char *const dsv4_flash[] = {
    "{\"kernel\": \"dsv4_attention_plan\"}",
    "{\"kernel\": \"dsv4_attention\", \"H\": 4096, \"page_size\": 128, \"draft_tokens\": 0, \"hca\": 0}",
    "{\"kernel\": \"dsv4_attention\", \"H\": 4096, \"page_size\": 128, \"draft_tokens\": 0, \"hca\": 1}",
    "{\"kernel\": \"dsv4_attention\", \"H\": 4096, \"page_size\": 128, \"draft_tokens\": 1, \"hca\": 0}",
    "{\"kernel\": \"dsv4_attention\", \"H\": 4096, \"page_size\": 128, \"draft_tokens\": 1, \"hca\": 1}",
    "{\"kernel\": \"dsv4_attention\", \"H\": 4096, \"page_size\": 128, \"draft_tokens\": 2, \"hca\": 0}",
    "{\"kernel\": \"dsv4_attention\", \"H\": 4096, \"page_size\": 128, \"draft_tokens\": 2, \"hca\": 1}",
    "{\"kernel\": \"dsv4_attention\", \"H\": 4096, \"page_size\": 128, \"draft_tokens\": 3, \"hca\": 0}",
    "{\"kernel\": \"dsv4_attention\", \"H\": 4096, \"page_size\": 128, \"draft_tokens\": 3, \"hca\": 1}",
    "{\"kernel\": \"dsv4_attention\", \"H\": 4096, \"page_size\": 256, \"draft_tokens\": 0, \"hca\": 0}",
    "{\"kernel\": \"dsv4_attention\", \"H\": 4096, \"page_size\": 256, \"draft_tokens\": 0, \"hca\": 1}",
    "{\"kernel\": \"dsv4_attention\", \"H\": 4096, \"page_size\": 256, \"draft_tokens\": 1, \"hca\": 0}",
    "{\"kernel\": \"dsv4_attention\", \"H\": 4096, \"page_size\": 256, \"draft_tokens\": 1, \"hca\": 1}",
    "{\"kernel\": \"dsv4_attention\", \"H\": 4096, \"page_size\": 256, \"draft_tokens\": 2, \"hca\": 0}",
    "{\"kernel\": \"dsv4_attention\", \"H\": 4096, \"page_size\": 256, \"draft_tokens\": 2, \"hca\": 1}",
    "{\"kernel\": \"dsv4_attention\", \"H\": 4096, \"page_size\": 256, \"draft_tokens\": 3, \"hca\": 0}",
    "{\"kernel\": \"dsv4_attention\", \"H\": 4096, \"page_size\": 256, \"draft_tokens\": 3, \"hca\": 1}",
    "{\"kernel\": \"dsv4_output_proj_a\", \"H\": 4096, \"G\": 8}",
    "{\"kernel\": \"dsv4_output_proj_b\", \"H\": 4096, \"G\": 8}",
    "{\"kernel\": \"dsv4_output_proj_a_stream\", \"H\": 4096, \"G\": 8, \"NT\": 1}",
    "{\"kernel\": \"dsv4_output_proj_a_stream\", \"H\": 4096, \"G\": 8, \"NT\": 2}",
    "{\"kernel\": \"dsv4_output_proj_a_stream\", \"H\": 4096, \"G\": 8, \"NT\": 4}",
    "{\"kernel\": \"dsv4_output_proj_a_stream\", \"H\": 4096, \"G\": 8, \"NT\": 8}",
    "{\"kernel\": \"dsv4_output_proj_b_stream\", \"H\": 4096, \"G\": 8, \"NT\": 1}",
    "{\"kernel\": \"dsv4_output_proj_b_stream\", \"H\": 4096, \"G\": 8, \"NT\": 2}",
    "{\"kernel\": \"dsv4_output_proj_b_stream\", \"H\": 4096, \"G\": 8, \"NT\": 4}",
    "{\"kernel\": \"dsv4_output_proj_b_stream\", \"H\": 4096, \"G\": 8, \"NT\": 8}",
    /* the one launch: mla_output_proj's default at 8 < T <= 16 (NT 2) */
    "{\"kernel\": \"dsv4_output_proj_stream\", \"H\": 4096, \"G\": 8, \"NT\": 2}",
    NULL,
};

/* FlashMLA-compatible dense decode: the metadata kernel, every decode specialization (kv_dtype 0
 * bf16, 1 fp16, 2 fp8 e4m3; page_class 0 any page size, 1 multiples of 64; causal 0/1), the
 * sm_90a wgmma decode's (bf16/fp16; page_class 1 TMA loads for multiples of 8; compiled for
 * sm_90a only, the one target it runs on) and both
 * combine kernels (out_dtype 0 bf16, 1 fp16). */
static const char *const flashmla_decode[] = {
    "{\"kernel\": \"flashmla_metadata\"}",
    "{\"kernel\": \"flashmla_decode\", \"kv_dtype\": 0, \"page_class\": 0, \"causal\": 0}",
    "{\"kernel\": \"flashmla_decode\", \"kv_dtype\": 0, \"page_class\": 0, \"causal\": 1}",
    "{\"kernel\": \"flashmla_decode\", \"kv_dtype\": 0, \"page_class\": 1, \"causal\": 0}",
    "{\"kernel\": \"flashmla_decode\", \"kv_dtype\": 0, \"page_class\": 1, \"causal\": 1}",
    "{\"kernel\": \"flashmla_decode\", \"kv_dtype\": 1, \"page_class\": 0, \"causal\": 0}",
    "{\"kernel\": \"flashmla_decode\", \"kv_dtype\": 1, \"page_class\": 0, \"causal\": 1}",
    "{\"kernel\": \"flashmla_decode\", \"kv_dtype\": 1, \"page_class\": 1, \"causal\": 0}",
    "{\"kernel\": \"flashmla_decode\", \"kv_dtype\": 1, \"page_class\": 1, \"causal\": 1}",
    "{\"kernel\": \"flashmla_decode\", \"kv_dtype\": 2, \"page_class\": 0, \"causal\": 0}",
    "{\"kernel\": \"flashmla_decode\", \"kv_dtype\": 2, \"page_class\": 0, \"causal\": 1}",
    "{\"kernel\": \"flashmla_decode\", \"kv_dtype\": 2, \"page_class\": 1, \"causal\": 0}",
    "{\"kernel\": \"flashmla_decode\", \"kv_dtype\": 2, \"page_class\": 1, \"causal\": 1}",
    "{\"kernel\": \"flashmla_decode_sm90\", \"kv_dtype\": 0, \"page_class\": 0, \"causal\": 0}",
    "{\"kernel\": \"flashmla_decode_sm90\", \"kv_dtype\": 0, \"page_class\": 0, \"causal\": 1}",
    "{\"kernel\": \"flashmla_decode_sm90\", \"kv_dtype\": 0, \"page_class\": 1, \"causal\": 0}",
    "{\"kernel\": \"flashmla_decode_sm90\", \"kv_dtype\": 0, \"page_class\": 1, \"causal\": 1}",
    "{\"kernel\": \"flashmla_decode_sm90\", \"kv_dtype\": 1, \"page_class\": 0, \"causal\": 0}",
    "{\"kernel\": \"flashmla_decode_sm90\", \"kv_dtype\": 1, \"page_class\": 0, \"causal\": 1}",
    "{\"kernel\": \"flashmla_decode_sm90\", \"kv_dtype\": 1, \"page_class\": 1, \"causal\": 0}",
    "{\"kernel\": \"flashmla_decode_sm90\", \"kv_dtype\": 1, \"page_class\": 1, \"causal\": 1}",
    "{\"kernel\": \"flashmla_decode_sm90x2\", \"kv_dtype\": 0}",
    "{\"kernel\": \"flashmla_decode_sm90x2\", \"kv_dtype\": 1}",
    "{\"kernel\": \"flashmla_combine\", \"out_dtype\": 0}",
    "{\"kernel\": \"flashmla_combine\", \"out_dtype\": 1}",
    NULL,
};

/* FlashMLA-compatible sparse decode (fp8 656-byte rows) and sparse prefill (d_qk 576 and 512):
 * the portable kernels and the sm_90a wgmma ones (decode at h_q <= 64 and, on the CTA pair, > 64;
 * prefill at d_qk 576; compiled for sm_90a only, the one target they run on). */
static const char *const flashmla_sparse[] = {
    "{\"kernel\": \"flashmla_sparse_decode\"}",
    "{\"kernel\": \"flashmla_sparse_prefill\", \"d_qk\": 576}",
    "{\"kernel\": \"flashmla_sparse_prefill\", \"d_qk\": 512}",
    "{\"kernel\": \"flashmla_sparse_decode_sm90\"}",
    "{\"kernel\": \"flashmla_sparse_decode_sm90x2c\"}",
    "{\"kernel\": \"flashmla_sparse_prefill_sm90\"}",
    NULL,
};

static const cli_preset presets[] = {
    {"dsv4-flash", "DeepSeek-V4-Flash (H=4096, pages 128/256, draft_tokens 0..3, SWA+HCA)",
     dsv4_flash},
    {"flashmla-decode", "FlashMLA-compatible dense decode (bf16/fp16/fp8 KV, any page size, "
     "causal and not)", flashmla_decode},
    {"flashmla-sparse", "FlashMLA-compatible sparse decode (fp8 656-byte rows) and sparse prefill "
     "(d_qk 576 and 512)", flashmla_sparse},
};

const cli_preset *cli_presets(int *count) {
    *count = (int)(sizeof presets / sizeof presets[0]);
    return presets;
}

const cli_preset *cli_preset_find(const char *name) {
    int n;
    const cli_preset *p = cli_presets(&n);
    for (int i = 0; i < n; i++)
        if (!strcmp(p[i].name, name)) return &p[i];
    return NULL;
}

char *cli_preset_json(const cli_preset *preset) {
    size_t size = 8;
    for (const char *const *s = preset->specs; *s; s++) size += strlen(*s) + 8;
    char *out = malloc(size);
    if (!out) return NULL;
    strcpy(out, "[\n");
    for (const char *const *s = preset->specs; *s; s++) {
        strcat(out, "  ");
        strcat(out, *s);
        strcat(out, s[1] ? ",\n" : "\n");
    }
    strcat(out, "]\n");
    return out;
}
