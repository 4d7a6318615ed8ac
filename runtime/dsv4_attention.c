/* DSV4 (DeepSeek-V4) mla_attention: argument checks, the kind builder of "dsv4_attention" and
 * the cooperative launch of its persistent kernel (kernel_src/dsv4/attention.cu, docs/DSV4.md).
 * Every argument is checked before any device work. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "runtime/dsv4_kinds.h"
#include "runtime/internal.h"

#define DSV4_QL 1024
#define DSV4_KVL 512
#define DSV4_HEADS 64
#define DSV4_HEAD_DIM 512
#define DSV4_Q_COLS (DSV4_HEADS * DSV4_HEAD_DIM)
#define DSV4_RING 128          /* rows of a request's kv_score_ring window */
#define DSV4_ROW_BYTES 576     /* one KV row; its scale slot is 8 more bytes */
#define DSV4_PAGE_ROW_BYTES 584
#define DSV4_MAX_H 65536
#define DSV4_MAX_SHIFT 20      /* page_size, c128_page_block <= 2^20 rows */
#define DSV4_ATTN_THREADS 256
#define DSV4_ATTN_SMEM 190464  /* kSmemBudget of kernel_src/dsv4/attention.cu */

static const char *const attention_param_names[] = {"H", "page_size", "draft_tokens", "hca"};

/* The kernel's argument, field for field mla::dsv4::Params (the kernel traps on a size drift). */
typedef struct attention_params {
    CUdeviceptr q_or_x, x;
    long long x_stride;
    CUdeviceptr kv_cache;
    long long kv_page_bytes;
    CUdeviceptr positions, freqs, wq_a, wq_a_sf, q_norm_w, wq_b, wq_b_sf, wkv, wkv_sf, kv_norm_w;
    CUdeviceptr swa_loc, attn_sink, plan, bank, qa, kv, qr, kv_gate, part_o, part_lse, part_k;
    CUdeviceptr wkv_gate, ring, ring_row, ape, c128_norm_w, c128_freqs, c128_out_loc, c128_pool;
    long long c128_page_bytes;
    CUdeviceptr c128_page_table;
    long long c128_pt_stride;
    CUdeviceptr c128_attn_len;
    int T, split, reset_barriers, c128_page_shift;
    float sm_scale, q_eps, kv_eps;
    int params_bytes;
} attention_params;

void mla_attention_args_init(mla_attention_args *args) {
    if (args == NULL) return;
    memset(args, 0, sizeof *args);
    args->struct_size = sizeof *args;
    args->q_eps = 1e-6f;
    args->kv_eps = 1e-6f;
    args->reset_barriers = 1;
}

/* ---- the kind builder ----------------------------------------------------------------------- */

/* A power of two in [1, 2^DSV4_MAX_SHIFT]. */
static mla_status check_pow2(long long v, const char *name) {
    MLA_ARG_CHECK(v > 0 && (v & (v - 1)) == 0 && v <= (1LL << DSV4_MAX_SHIFT),
                  "%s: expected a power of two in [1, %d], got %lld", name, 1 << DSV4_MAX_SHIFT, v);
    return MLA_OK;
}

/* log2 of a power of two. */
static int log2_pow2(long long v) {
    int s = 0;
    while ((1LL << s) < v) ++s;
    return s;
}

/* H a multiple of 128 (spec §5: the SfAtom scales need it) in [128, DSV4_MAX_H]. */
static mla_status check_hidden_size(long long H, const char *name) {
    MLA_ARG_CHECK(H % 128 == 0 || H % 32 != 0 || H <= 0,
                  "%s: H = %lld is a multiple of 32 but not of 128: the SfAtom scales of wq_a_sf "
                  "and wkv_sf need H %% 128 == 0 (every DeepSeek-V4 size qualifies)", name, H);
    MLA_ARG_CHECK(H > 0 && H % 128 == 0 && H <= DSV4_MAX_H,
                  "%s: expected H a positive multiple of 128 up to %d, got %lld", name, DSV4_MAX_H,
                  H);
    return MLA_OK;
}

mla_status mla__dsv4_attention_build(const mla__spec *spec, char *name_expr, size_t size,
                                     mla__launch_info *launch) {
    MLA_ARG_CHECK(spec->n_params == 4, "%s: expected 4 parameters (H, page_size, draft_tokens, "
                  "hca), got %d", spec->kernel, spec->n_params);
    for (int i = 0; i < 4; i++)
        MLA_ARG_CHECK(strcmp(spec->params[i].name, attention_param_names[i]) == 0,
                      "%s: expected parameter %d to be %s, got %s", spec->kernel, i,
                      attention_param_names[i], spec->params[i].name);
    const long long H = spec->params[0].value, page = spec->params[1].value;
    const long long draft = spec->params[2].value, hca = spec->params[3].value;
    MLA_FORWARD_IF_ERROR(check_hidden_size(H, "H"));
    MLA_FORWARD_IF_ERROR(check_pow2(page, "page_size"));
    MLA_ARG_CHECK(draft >= 0 && draft <= MLA_DSV4_MAX_TOKENS,
                  "draft_tokens: expected 0 <= draft_tokens <= %d, got %lld", MLA_DSV4_MAX_TOKENS,
                  draft);
    MLA_ARG_CHECK(hca == 0 || hca == 1, "hca: expected 0 (SWA) or 1 (HCA), got %lld", hca);
    int n = snprintf(name_expr, size, "mla::dsv4::attention_kernel<%lld, %lld, %lld, %lld>", H,
                     page, draft, hca);
    MLA_RETURN_ERROR_IF(n < 0 || (size_t)n >= size, MLA_ERR_INTERNAL,
                        "%s: name expression buffer of %zu bytes too small", spec->kernel, size);
    launch->threads = DSV4_ATTN_THREADS;
    launch->dynamic_smem = DSV4_ATTN_SMEM;
    launch->cluster = 1;
    return MLA_OK;
}

/* ---- tensor checks -------------------------------------------------------------------------- */

/* A contiguous tensor of dtype with the given shape (ndim <= 2), data aligned to align bytes. */
static mla_status check_shaped(const mla_runtime *rt, const DLTensor *t, const char *name,
                               mla__dtype dtype, int ndim, int64_t d0, int64_t d1,
                               const char *what0, const char *what1, unsigned align) {
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, t, name, dtype, ndim));
    MLA_FORWARD_IF_ERROR(mla__check_dim(t, name, 0, d0, what0));
    if (ndim > 1) MLA_FORWARD_IF_ERROR(mla__check_dim(t, name, 1, d1, what1));
    MLA_FORWARD_IF_ERROR(mla__check_contiguous(t, name));
    return mla__check_align(t, name, align);
}

/* A [T] int32 contiguous per-token vector. */
static mla_status check_token_vector(const mla_runtime *rt, const DLTensor *v, const char *name,
                                     int T) {
    return check_shaped(rt, v, name, MLA_DT_INT32, 1, T, 0, "T of q_or_x", NULL, 4);
}

/* An fp8 weight [N, K] and its SfAtom scales [N, K / 32], both contiguous. */
static mla_status check_fp8_weight(const mla_runtime *rt, const DLTensor *w, const char *wname,
                                   const DLTensor *sf, const char *sfname, int64_t N, int64_t K,
                                   const char *k_what) {
    MLA_FORWARD_IF_ERROR(check_shaped(rt, w, wname, MLA_DT_FP8_E4M3, 2, N, K, "rows", k_what, 16));
    return check_shaped(rt, sf, sfname, MLA_DT_UINT8, 2, N, K / 32, "rows of the weight",
                        "K / 32 of the weight", 4);
}

/* A RoPE table [max_pos, 64] float32, contiguous, 16-byte aligned. */
static mla_status check_rope_table(const mla_runtime *rt, const DLTensor *f, const char *name) {
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, f, name, MLA_DT_FP32, 2));
    MLA_ARG_CHECK(f->shape[0] >= 1, "%s: expected max_pos = shape[0] >= 1, got %lld", name,
                  (long long)f->shape[0]);
    return check_shaped(rt, f, name, MLA_DT_FP32, 2, f->shape[0], 64, "max_pos",
                        "32 (cos, sin) pairs", 16);
}

/* A paged KV buffer [num_pages, page_bytes] uint8, contiguous, 16-byte aligned, whose pages hold
 * rows rows of 576 bytes and their 8-byte scale slots. */
static mla_status check_kv_pages(const mla_runtime *rt, const DLTensor *c, const char *name,
                                 long long rows, const char *rows_name) {
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, c, name, MLA_DT_UINT8, 2));
    MLA_ARG_CHECK(c->shape[0] >= 1, "%s: expected num_pages = shape[0] >= 1, got %lld", name,
                  (long long)c->shape[0]);
    const long long pb = (long long)c->shape[1];
    MLA_ARG_CHECK(pb % DSV4_ROW_BYTES == 0 && pb >= rows * DSV4_PAGE_ROW_BYTES,
                  "%s: expected page_bytes = shape[1] a multiple of 576 and >= %s * 584 = %lld, "
                  "got %lld", name, rows_name, rows * DSV4_PAGE_ROW_BYTES, pb);
    MLA_FORWARD_IF_ERROR(mla__check_contiguous(c, name));
    return mla__check_align(c, name, 16);
}

/* q_or_x [T, 32768] bf16 contiguous, 1 <= T <= 640; sets T. */
static mla_status check_q_or_x(const mla_runtime *rt, const DLTensor *q, int *T) {
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, q, "q_or_x", MLA_DT_BF16, 2));
    const long long t = (long long)q->shape[0];
    MLA_ARG_CHECK(t >= 1 && t <= MLA_DSV4_MAX_TOKENS,
                  "q_or_x: expected T = shape[0] in [1, %d], got %lld", MLA_DSV4_MAX_TOKENS, t);
    MLA_FORWARD_IF_ERROR(check_shaped(rt, q, "q_or_x", MLA_DT_BF16, 2, t, DSV4_Q_COLS, "T",
                                      "64 heads x 512", 16));
    *T = (int)t;
    return MLA_OK;
}

/* hidden_states [T, H] bf16, unit column stride, 16-byte aligned rows; sets H. */
static mla_status check_hidden_states(const mla_runtime *rt, const DLTensor *x, int T,
                                      long long *H) {
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, x, "hidden_states", MLA_DT_BF16, 2));
    MLA_FORWARD_IF_ERROR(mla__check_dim(x, "hidden_states", 0, T, "T of q_or_x"));
    const long long h = (long long)x->shape[1], rs = (long long)mla__stride(x, 0);
    MLA_FORWARD_IF_ERROR(check_hidden_size(h, "hidden_states"));
    MLA_ARG_CHECK(mla__stride(x, 1) == 1, "hidden_states: expected unit column stride, got %lld",
                  (long long)mla__stride(x, 1));
    MLA_ARG_CHECK(T == 1 || (rs >= h && rs * 2 % 16 == 0),
                  "hidden_states: expected a row stride >= H = %lld with 16-byte aligned rows "
                  "(a multiple of 8 elements), got %lld", h, rs);
    MLA_FORWARD_IF_ERROR(mla__check_align(x, "hidden_states", 16));
    *H = h;
    return MLA_OK;
}

/* The weights and norm gains shared by both layer kinds. */
static mla_status check_weights(const mla_runtime *rt, const mla_attention_args *a, long long H) {
    MLA_FORWARD_IF_ERROR(check_fp8_weight(rt, a->wq_a_weight, "wq_a_weight", a->wq_a_sf,
                                          "wq_a_sf", DSV4_QL, H, "H of hidden_states"));
    MLA_FORWARD_IF_ERROR(check_shaped(rt, a->q_norm_weight, "q_norm_weight", MLA_DT_BF16, 1,
                                      DSV4_QL, 0, "q_lora rank", NULL, 16));
    MLA_FORWARD_IF_ERROR(check_fp8_weight(rt, a->wq_b_weight, "wq_b_weight", a->wq_b_sf,
                                          "wq_b_sf", DSV4_Q_COLS, DSV4_QL, "q_lora rank"));
    MLA_FORWARD_IF_ERROR(check_fp8_weight(rt, a->wkv_weight, "wkv_weight", a->wkv_sf, "wkv_sf",
                                          DSV4_KVL, H, "H of hidden_states"));
    return check_shaped(rt, a->kv_norm_weight, "kv_norm_weight", MLA_DT_BF16, 1, DSV4_KVL, 0,
                        "kv_lora rank", NULL, 16);
}

/* Inputs of both layer kinds other than the weights. */
static mla_status check_common(const mla_runtime *rt, const mla_attention_args *a, int T) {
    MLA_FORWARD_IF_ERROR(check_pow2(a->page_size, "page_size"));
    MLA_FORWARD_IF_ERROR(check_kv_pages(rt, a->kv_cache, "kv_cache", a->page_size, "page_size"));
    MLA_FORWARD_IF_ERROR(check_token_vector(rt, a->positions, "positions", T));
    MLA_FORWARD_IF_ERROR(check_rope_table(rt, a->freqs_real, "freqs_real"));
    MLA_ARG_CHECK(isfinite(a->sm_scale), "sm_scale: expected a finite float, got %g",
                  (double)a->sm_scale);
    MLA_FORWARD_IF_ERROR(check_token_vector(rt, a->swa_loc, "swa_loc", T));
    if (a->attn_sink != NULL)
        MLA_FORWARD_IF_ERROR(check_shaped(rt, a->attn_sink, "attn_sink", MLA_DT_FP32, 1,
                                          DSV4_HEADS, 0, "heads", NULL, 4));
    MLA_ARG_CHECK(isfinite(a->q_eps) && a->q_eps >= 0.0f,
                  "q_eps: expected a finite float >= 0, got %g", (double)a->q_eps);
    MLA_ARG_CHECK(isfinite(a->kv_eps) && a->kv_eps >= 0.0f,
                  "kv_eps: expected a finite float >= 0, got %g", (double)a->kv_eps);
    return MLA_OK;
}

/* The c128 pool, its geometry and page table (HCA). */
static mla_status check_c128_pool(const mla_runtime *rt, const mla_attention_args *a, int T) {
    MLA_FORWARD_IF_ERROR(check_pow2(a->c128_page_block, "c128_page_block"));
    MLA_FORWARD_IF_ERROR(check_kv_pages(rt, a->c128_pool, "c128_pool", a->c128_page_block,
                                        "c128_page_block"));
    MLA_ARG_CHECK(a->c128_stride_kv_block == (long long)a->c128_pool->shape[1],
                  "c128_stride_kv_block: expected %lld (shape[1] of c128_pool), got %lld",
                  (long long)a->c128_pool->shape[1], a->c128_stride_kv_block);
    const DLTensor *pt = a->c128_page_table;
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, pt, "c128_page_table", MLA_DT_INT32, 2));
    MLA_FORWARD_IF_ERROR(mla__check_dim(pt, "c128_page_table", 0, T, "T of q_or_x"));
    MLA_ARG_CHECK(pt->shape[1] >= 1, "c128_page_table: expected max_pages = shape[1] >= 1, "
                  "got %lld", (long long)pt->shape[1]);
    MLA_ARG_CHECK(mla__stride(pt, 1) == 1, "c128_page_table: expected unit column stride, got "
                  "%lld", (long long)mla__stride(pt, 1));
    MLA_ARG_CHECK(T == 1 || mla__stride(pt, 0) >= 0, "c128_page_table: expected a non-negative "
                  "row stride, got %lld", (long long)mla__stride(pt, 0));
    return mla__check_align(pt, "c128_page_table", 4);
}

/* Every HCA input (wkv_gate_weight and c128_attn_len are both given). */
static mla_status check_hca(const mla_runtime *rt, const mla_attention_args *a, int T,
                            long long H) {
    MLA_FORWARD_IF_ERROR(check_shaped(rt, a->wkv_gate_weight, "wkv_gate_weight", MLA_DT_BF16, 2,
                                      2 * DSV4_KVL, H, "kv and score halves",
                                      "H of hidden_states", 16));
    const DLTensor *ring = a->kv_score_ring;
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, ring, "kv_score_ring", MLA_DT_FP32, 2));
    MLA_ARG_CHECK(ring->shape[0] >= DSV4_RING && ring->shape[0] % DSV4_RING == 0,
                  "kv_score_ring: expected shape[0] = num_requests * 128 (a positive multiple "
                  "of 128), got %lld", (long long)ring->shape[0]);
    MLA_FORWARD_IF_ERROR(check_shaped(rt, ring, "kv_score_ring", MLA_DT_FP32, 2, ring->shape[0],
                                      2 * DSV4_KVL, "num_requests * 128", "[kv | score]", 16));
    MLA_FORWARD_IF_ERROR(check_token_vector(rt, a->kv_gate_ring_row, "kv_gate_ring_row", T));
    MLA_FORWARD_IF_ERROR(check_shaped(rt, a->c128_ape, "c128_ape", MLA_DT_FP32, 2, DSV4_RING,
                                      DSV4_KVL, "ring rows", "kv_lora rank", 4));
    MLA_FORWARD_IF_ERROR(check_shaped(rt, a->c128_norm_weight, "c128_norm_weight", MLA_DT_BF16,
                                      1, DSV4_KVL, 0, "kv_lora rank", NULL, 16));
    MLA_FORWARD_IF_ERROR(check_rope_table(rt, a->c128_freqs_real, "c128_freqs_real"));
    MLA_FORWARD_IF_ERROR(check_token_vector(rt, a->c128_out_loc, "c128_out_loc", T));
    MLA_FORWARD_IF_ERROR(check_c128_pool(rt, a, T));
    return check_token_vector(rt, a->c128_attn_len, "c128_attn_len", T);
}

/* On an SWA layer every HCA argument is NULL / 0. */
static mla_status check_swa_only(const mla_attention_args *a) {
    const DLTensor *const t[] = {a->kv_score_ring, a->kv_gate_ring_row, a->c128_ape,
                                 a->c128_norm_weight, a->c128_freqs_real, a->c128_out_loc,
                                 a->c128_pool, a->c128_page_table};
    static const char *const names[] = {"kv_score_ring", "kv_gate_ring_row", "c128_ape",
                                        "c128_norm_weight", "c128_freqs_real", "c128_out_loc",
                                        "c128_pool", "c128_page_table"};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        MLA_ARG_CHECK(t[i] == NULL, "%s: expected NULL on an SWA layer (wkv_gate_weight and "
                      "c128_attn_len are NULL), got a tensor", names[i]);
    MLA_ARG_CHECK(a->c128_stride_kv_block == 0, "c128_stride_kv_block: expected 0 on an SWA "
                  "layer, got %lld", a->c128_stride_kv_block);
    MLA_ARG_CHECK(a->c128_page_block == 0, "c128_page_block: expected 0 on an SWA layer, got %d",
                  a->c128_page_block);
    return MLA_OK;
}

/* The layer kind: HCA iff wkv_gate_weight and c128_attn_len are given (both or neither). */
static mla_status check_kind(const mla_runtime *rt, const mla_attention_args *a, int T,
                             long long H, int *hca) {
    const int gate = a->wkv_gate_weight != NULL, len = a->c128_attn_len != NULL;
    MLA_ARG_CHECK(gate == len, "wkv_gate_weight and c128_attn_len: expected both (HCA layer) or "
                  "neither (SWA layer), got only %s", gate ? "wkv_gate_weight" : "c128_attn_len");
    *hca = gate;
    return gate ? check_hca(rt, a, T, H) : check_swa_only(a);
}

/* End of the last workspace region mla_attention uses for T tokens. */
static size_t attention_ws_end(const mla__dsv4_ws_layout *l, int T) {
    const size_t tp = T < MLA__DSV4_SPLIT_TOKENS ? (size_t)T : MLA__DSV4_SPLIT_TOKENS;
    size_t end = l->qr + (size_t)T * DSV4_QL * 2;
    const size_t ends[] = {l->qa + (size_t)T * DSV4_QL * 2, l->kv + (size_t)T * DSV4_KVL * 2,
                           l->kv_gate + (size_t)T * 2 * DSV4_KVL * 4,
                           l->part_lse + mla__dsv4_part_slots(T) * DSV4_HEADS * 4,
                           l->part_k + MLA__DSV4_KSLICES * tp * MLA__DSV4_PART_K_COLS * 4};
    for (size_t i = 0; i < sizeof ends / sizeof ends[0]; i++)
        if (ends[i] > end) end = ends[i];
    return end;
}

/* The workspace holds the regions of T tokens (layout of T, H; G does not move them). */
static mla_status check_workspace(const mla_runtime *rt, const DLTensor *ws, int T, long long H,
                                  mla__dsv4_ws_layout *layout) {
    MLA_FORWARD_IF_ERROR(mla__dsv4_check_workspace(rt, ws, MLA__DSV4_PLAN_END));
    mla__dsv4_layout(T, H, 1, layout);
    const size_t need = attention_ws_end(layout, T);
    MLA_ARG_CHECK(ws->shape[0] >= (int64_t)need,
                  "workspace: expected at least %zu bytes for T = %d tokens and H = %lld (from "
                  "mla_workspace with max_tokens >= T), got %lld bytes", need, T, H,
                  (long long)ws->shape[0]);
    return MLA_OK;
}

/* draft_tokens, reset_barriers. */
static mla_status check_launch_ints(const mla_attention_args *a, int T) {
    MLA_ARG_CHECK(a->draft_tokens >= 0 && a->draft_tokens <= MLA_DSV4_MAX_TOKENS,
                  "draft_tokens: expected 0 <= draft_tokens <= %d, got %d", MLA_DSV4_MAX_TOKENS,
                  a->draft_tokens);
    MLA_ARG_CHECK(a->draft_tokens == 0 || T % a->draft_tokens == 0,
                  "draft_tokens: expected a divisor of T = %d (requests of draft_tokens tokens), "
                  "got %d", T, a->draft_tokens);
    MLA_ARG_CHECK(a->reset_barriers == 0 || a->reset_barriers == 1,
                  "reset_barriers: expected 0 or 1, got %d", a->reset_barriers);
    return MLA_OK;
}

/* ---- launch --------------------------------------------------------------------------------- */

static CUdeviceptr opt_data(const DLTensor *t) { return t != NULL ? mla__data(t) : 0; }

/* The kernel argument of a checked call. */
static void fill_params(const mla_runtime *rt, const mla_attention_args *a, int T, int hca,
                        const mla__dsv4_ws_layout *l, attention_params *p) {
    const CUdeviceptr ws = mla__data(a->workspace);
    const int kind = hca ? MLA__DSV4_HCA : MLA__DSV4_SWA;
    memset(p, 0, sizeof *p);
    p->q_or_x = mla__data(a->q_or_x), p->x = mla__data(a->hidden_states);
    p->x_stride = (long long)mla__stride(a->hidden_states, 0);
    p->kv_cache = mla__data(a->kv_cache), p->kv_page_bytes = (long long)a->kv_cache->shape[1];
    p->positions = mla__data(a->positions), p->freqs = mla__data(a->freqs_real);
    p->wq_a = mla__data(a->wq_a_weight), p->wq_a_sf = mla__data(a->wq_a_sf);
    p->q_norm_w = mla__data(a->q_norm_weight);
    p->wq_b = mla__data(a->wq_b_weight), p->wq_b_sf = mla__data(a->wq_b_sf);
    p->wkv = mla__data(a->wkv_weight), p->wkv_sf = mla__data(a->wkv_sf);
    p->kv_norm_w = mla__data(a->kv_norm_weight), p->swa_loc = mla__data(a->swa_loc);
    p->attn_sink = opt_data(a->attn_sink);
    p->plan = ws + mla__dsv4_plan_offset(kind), p->bank = ws + mla__dsv4_bank_offset(kind);
    p->qa = ws + l->qa, p->kv = ws + l->kv, p->qr = ws + l->qr, p->kv_gate = ws + l->kv_gate;
    p->part_o = ws + l->part_o, p->part_lse = ws + l->part_lse, p->part_k = ws + l->part_k;
    p->T = T, p->split = mla__dsv4_kv_splits(rt, T, hca), p->reset_barriers = a->reset_barriers;
    p->sm_scale = a->sm_scale, p->q_eps = a->q_eps, p->kv_eps = a->kv_eps;
    p->params_bytes = (int)sizeof *p;
}

/* The HCA part of the kernel argument. */
static void fill_hca_params(const mla_attention_args *a, attention_params *p) {
    p->wkv_gate = mla__data(a->wkv_gate_weight), p->ring = mla__data(a->kv_score_ring);
    p->ring_row = mla__data(a->kv_gate_ring_row), p->ape = mla__data(a->c128_ape);
    p->c128_norm_w = mla__data(a->c128_norm_weight);
    p->c128_freqs = mla__data(a->c128_freqs_real), p->c128_out_loc = mla__data(a->c128_out_loc);
    p->c128_pool = mla__data(a->c128_pool), p->c128_page_bytes = a->c128_stride_kv_block;
    p->c128_page_table = mla__data(a->c128_page_table);
    p->c128_pt_stride = (long long)mla__stride(a->c128_page_table, 0);
    p->c128_attn_len = mla__data(a->c128_attn_len);
    p->c128_page_shift = log2_pow2(a->c128_page_block);
}

static mla_status attention_spec(long long H, int page_size, int draft, int hca, mla__spec *s) {
    const long long v[4] = {H, page_size, draft, hca};
    mla__spec_init(s, "dsv4_attention");
    for (int i = 0; i < 4; i++)
        MLA_FORWARD_IF_ERROR(mla__spec_add(s, attention_param_names[i], v[i]));
    return MLA_OK;
}

/* One CTA per SM, launched cooperatively: the driver refuses the launch unless every CTA can be
 * resident at once, which the kernel's grid barriers need. */
static mla_status launch_cooperative(mla_runtime *rt, const mla__kernel *k, CUstream stream,
                                     void **args) {
    int max_threads = 0;
    MLA_CU(rt, cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                                  k->function));
    MLA_RETURN_ERROR_IF(max_threads < k->launch.threads, MLA_ERR_NOT_SUPPORTED,
                        "dsv4_attention: the kernel fits %d threads per block on this device, "
                        "needs %d", max_threads, k->launch.threads);
    CUlaunchAttribute attr = {.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE};
    attr.value.cooperative = 1;
    CUlaunchConfig cfg = {
        .gridDimX = (unsigned)rt->sm_count, .gridDimY = 1, .gridDimZ = 1,
        .blockDimX = (unsigned)k->launch.threads, .blockDimY = 1, .blockDimZ = 1,
        .sharedMemBytes = (unsigned)k->launch.dynamic_smem, .hStream = stream,
        .attrs = &attr, .numAttrs = 1,
    };
    MLA_CU(rt, cuLaunchKernelEx(&cfg, k->function, args, NULL));
    return MLA_OK;
}

/* T <= this: phase 3 runs the stream GEMM (kQStreamTokens of attention.cu). */
#define DSV4_Q_STREAM_TOKENS 64
/* T <= this: phase 1 runs the stream GEMMs (kP1StreamTokens of attention.cu; the kernel may
 * take a lower threshold and ignore the descriptors above it). */
#define DSV4_P1_STREAM_TOKENS 64
/* HCA layers with H <= this: phase 1 at T > 32 in one pass of 64 tokens (kP1OnePassMaxH of
 * attention.cu); SWA layers and larger H in two halves of 32 (the qa2 / kv2 descriptors). */
#define DSV4_P1_ONE_PASS_MAX_H 4096

/* The kernel's third parameter, mla::dsv4::P1Maps (64-byte aligned CUtensorMaps). */
typedef struct p1_maps {
    mla__dsv4_maps qa, kv;
    CUtensorMap gate_w, gate_x;
    mla__dsv4_maps qa2, kv2;  /* T > 32: tokens 32.. of the x codes (the kernel's second half) */
} p1_maps;

/* T <= DSV4_P1_STREAM_TOKENS: phase 1's descriptors (attention.cu, P1Maps). The x codes are in
 * the part_o region, row t at t * (H + H / 32): H code bytes, then the scales; the workspace
 * check guarantees part_o's min(T, 16) * 512 KiB >= T * (H + H / 32) for T <= 64, H <= 65536. */
static mla_status fill_p1_maps(mla_runtime *rt, const mla_attention_args *a,
                               const attention_params *p, int T, long long H, int hca,
                               p1_maps *m) {
    /* tp: the token rows of a stage (kTP); [wq_a; wkv] in one pass of 64 tokens on HCA layers
     * with H <= DSV4_P1_ONE_PASS_MAX_H, else at most 32 (two halves above 32). */
    const int one_pass = hca && H <= DSV4_P1_ONE_PASS_MAX_H;
    const int tp = T <= 8 ? 8 : T <= 16 ? 16 : T <= 32 ? 32 : 64;
    const int tq = tp < 32 || one_pass ? tp : 32;
    const long long ldx = H + H / 32;
    MLA_FORWARD_IF_ERROR(mla__dsv4_stream_maps(rt, &m->qa, p->wq_a, H, DSV4_QL, H, 64, p->part_o,
                                               H, T, ldx, tq, p->wq_a_sf, 1));
    MLA_FORWARD_IF_ERROR(mla__dsv4_stream_maps(rt, &m->kv, p->wkv, H, DSV4_KVL, H, 64, p->part_o,
                                               H, T, ldx, tq, p->wkv_sf, 1));
    if (T > 32 && !one_pass) {
        const CUdeviceptr x2 = p->part_o + (CUdeviceptr)(32 * ldx);
        MLA_FORWARD_IF_ERROR(mla__dsv4_stream_maps(rt, &m->qa2, p->wq_a, H, DSV4_QL, H, 64, x2, H,
                                                   T - 32, ldx, 32, p->wq_a_sf, 1));
        MLA_FORWARD_IF_ERROR(mla__dsv4_stream_maps(rt, &m->kv2, p->wkv, H, DSV4_KVL, H, 64, x2, H,
                                                   T - 32, ldx, 32, p->wkv_sf, 1));
    }
    if (!hca) return MLA_OK;
    /* T == 1 may have any row stride: one row is read, so the descriptor takes 2 H. */
    const long long xs = T == 1 ? 2 * H : 2 * (long long)mla__stride(a->hidden_states, 0);
    MLA_FORWARD_IF_ERROR(mla__dsv4_byte_map(rt, &m->gate_w, p->wkv_gate, 2 * H, 2 * DSV4_KVL,
                                            2 * H, 64, "kv_gate stream GEMM W descriptor"));
    return mla__dsv4_byte_map(rt, &m->gate_x, p->x, 2 * H, T, xs, tp,
                              "kv_gate stream GEMM x descriptor");
}

/* ---- mla_attention -------------------------------------------------------------------------- */

/* Every argument; sets T, H, the kind and the workspace layout. */
static mla_status check_args(const mla_runtime *rt, const mla_attention_args *a, int *T,
                             long long *H, int *hca, mla__dsv4_ws_layout *layout) {
    MLA_ARG_CHECK(a->struct_size == sizeof *a, "args: expected struct_size %zu (call "
                  "mla_attention_args_init first), got %zu", sizeof *a, a->struct_size);
    MLA_FORWARD_IF_ERROR(check_q_or_x(rt, a->q_or_x, T));
    MLA_FORWARD_IF_ERROR(check_hidden_states(rt, a->hidden_states, *T, H));
    MLA_FORWARD_IF_ERROR(check_common(rt, a, *T));
    MLA_FORWARD_IF_ERROR(check_weights(rt, a, *H));
    MLA_FORWARD_IF_ERROR(check_kind(rt, a, *T, *H, hca));
    MLA_FORWARD_IF_ERROR(check_workspace(rt, a->workspace, *T, *H, layout));
    return check_launch_ints(a, *T);
}

mla_status mla_attention(mla_runtime *runtime, const mla_attention_args *args, CUstream stream) {
    MLA_ARG_CHECK(runtime != NULL, "runtime: expected a runtime, got NULL");
    MLA_ARG_CHECK(args != NULL, "args: expected an mla_attention_args, got NULL");
    int T = 0, hca = 0;
    long long H = 0;
    mla__dsv4_ws_layout layout;
    MLA_FORWARD_IF_ERROR(check_args(runtime, args, &T, &H, &hca, &layout));
    attention_params p;
    fill_params(runtime, args, T, hca, &layout, &p);
    if (hca) fill_hca_params(args, &p);
    mla__spec spec;
    MLA_FORWARD_IF_ERROR(attention_spec(H, args->page_size, args->draft_tokens, hca, &spec));
    MLA_FORWARD_IF_ERROR(mla__runtime_enter(runtime));
    const mla__kernel *k = NULL;
    MLA_FORWARD_IF_ERROR(mla__get_kernel(runtime, &spec, &k));
    /* T <= 64: the TMA descriptors of phase 3's stream GEMM (attention.cu, q_projection_stream:
     * 2 K-atoms per stage; T <= 16: 128-row wq_b boxes, 8 or 16 token rows of qr codes; above:
     * 64-row boxes, 64 token rows, CfgQbStream*). */
    mla__dsv4_maps maps;
    memset(&maps, 0, sizeof maps);
    const int tq = T <= 8 ? 8 : T <= 16 ? 16 : 64, bq = T <= 16 ? 128 : 64;
    if (T <= DSV4_Q_STREAM_TOKENS)
        MLA_FORWARD_IF_ERROR(mla__dsv4_stream_maps(
            runtime, &maps, p.wq_b, DSV4_QL, DSV4_Q_COLS, DSV4_QL, bq, p.qr, DSV4_QL, T,
            2 * DSV4_QL, tq, p.wq_b_sf, 2));
    p1_maps p1;
    memset(&p1, 0, sizeof p1);
    if (T <= DSV4_P1_STREAM_TOKENS)
        MLA_FORWARD_IF_ERROR(fill_p1_maps(runtime, args, &p, T, H, hca, &p1));
    void *kargs[] = {&p, &maps, &p1};
    return launch_cooperative(runtime, k, stream, kargs);
}
