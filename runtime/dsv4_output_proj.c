/* DSV4 mla_output_proj: argument checks, the kind builders ("dsv4_output_proj_a" / "_b", the
 * tiled kernels, params H and G; "dsv4_output_proj_a_stream" / "_b_stream" and the one-launch
 * "dsv4_output_proj_stream", params H, G, NT) and the launches (kernel_src/dsv4/output_proj.cu).
 *
 * Graph-capturable, by T (defaults; MLAJIT_DSV4_OUTPROJ selects the others for comparisons):
 *   T <= 8: the stream kernels A (its consumers first wait for the attention, its PDL primary,
 *     then quantize their share of O) and B (a programmatic dependent of A); "fused": both in one
 *     launch (use_fused);
 *   8 < T <= 16: both in one launch (dsv4_output_proj_stream) where the grid fits the SMs and the
 *     rings one CTA, else the two kernels; "split": the two kernels;
 *   16 < T <= 64: the stream kernels A and B with K slices, both programmatic dependents;
 *   T > 64: the tiled kernels A (combine + inverse RoPE + group-32 quant of O, then the grouped
 *     wo_a GEMM with mxq(o_lora) in its epilogue) behind a cuMemsetD8Async of the bank, and B.
 * The ticket and ready words are zero on entry: kernel B (or the one-launch kernel's last CTA)
 * leaves bank words [0, 128) zeroed, mla_workspace_init zeroes them first, mla_attention never
 * writes them; the split-K counters (words 128..255) reset themselves. */
#include <stdio.h>
#include <string.h>

#include "mlajit/dsv4.h"
#include "runtime/dsv4_kinds.h"
#include "runtime/internal.h"

#define OP_COLS 32768       /* 64 heads x 512, the flat O row */
#define OP_HEADS 64
#define OP_ROPE 64          /* freqs_real columns */
#define OP_MAX_H 4096
/* Tile shapes of kernel_src/dsv4/output_proj.cu (CfgA, CfgB); the kernels trap when given less
 * shared memory than these sizes. */
#define OP_THREADS 128
#define OP_BM 64
#define OP_BN_A 64
#define OP_BN_B 32
#define OP_STAGES 4
#define OP_STAGE_BYTES(bn) (OP_BM * 128 + OP_BM * 4 + (bn) * 128 + (bn) * 4)
#define OP_SMEM_BYTES(bn) (OP_STAGES * OP_STAGE_BYTES(bn) + OP_BM * 256 + (bn) * 256)
#define OP_QUANT_WARPS 4    /* units (token, head) per quantize item: a multiple of this */
#define OP_QUANT_WAVES 4    /* aim at this many quantize items per SM */
#define OP_KSLICES MLA__DSV4_OP_KSLICES /* most K slices per tile (split-K, one m-tile) */
#define OP_SPLIT_CTAS_PER_SM 2          /* split-K aims at this many GEMM CTAs per SM */
#define OP_BANK_ZERO_WORDS 128          /* kernel B zeroes bank words [0, 128); the split-K
                                           tile counters above reset themselves */

/* The weight-streaming kernels for T <= 64 (output_proj_*_stream_kernel, common/stream_gemm.cuh):
 * NT = ceil(T / 8) token tiles, 8 consumer warps + 1 producer warp, and the shared memory of
 * sgemm::Config<bn, NT, ks, stages, ., sf_row> (StreamCfgA / StreamCfgB of output_proj.cu). */
#define OP_S_TOKENS 16
#define OP_S_THREADS 288
#define OP_S_THREADS_A 160 /* kernel A at T <= 8: one consumer warpgroup + the producer */
#define OP_S_BN_A 64
#define OP_S_BN_B 32
#define OP_S_KS_A 256
/* ftable: the kMathWgmmaRows configurations' float copy of the A scale table. */
static long long stream_stage(int bn, int nt, int ks) {
    long long atoms = ks / 128;
    return (atoms * (bn + 8LL * nt) * 128 + atoms * 512 + 1023) / 1024 * 1024;
}
static long long stream_smem(int bn, int nt, int ks, int stages, long long sf_row, int ftable) {
    return stages * stream_stage(bn, nt, ks) + 8LL * nt * sf_row * (ftable ? 5 : 1) +
           2LL * stages * 8 + 1024;
}
/* 16 < T <= 64 (NT 4 / 8): 128-row W blocks on the wgmma-rows consumer, kernel A's K in 2
 * slices (4 where K >= 16384), kernel B's in 4, the scale table of one slice, at most 4 stages
 * that fit the shared memory (kStreamBnW, stream_slices_a, kStreamSlicesB, stream_stages_w of
 * output_proj.cu). */
#define OP_W_BN 128
#define OP_W_KS 256
#define OP_W_SLICES_B 4
#define OP_W_SMEM_LIMIT 232448
static int w_slices_a(long long K) { return K >= 16384 ? 4 : 2; }
static int w_stages(int nt, long long sf_row) {
    long long n = (OP_W_SMEM_LIMIT - (5 * 8LL * nt * sf_row + 1024 + 64)) /
                  stream_stage(OP_W_BN, nt, OP_W_KS);
    return n > 4 ? 4 : (int)n;
}
static long long w_sf_row_a(long long G) { return OP_COLS / G / 32 / w_slices_a(OP_COLS / G); }
static long long w_sf_row_b(long long H) { return 2 * H / 32 / OP_W_SLICES_B; }
static int stream_stages_a(int nt) { return nt <= 2 ? 5 : 3; }
static int stream_ks_b(int nt) { return nt <= 2 ? 512 : 256; }
static int stream_stages_b(int nt) { return nt == 1 ? 5 : (nt == 2 ? 4 : 3); }
static int stream_nt(int T) { return T <= 8 ? 1 : (T <= 16 ? 2 : (T <= 32 ? 4 : 8)); }

/* ---- kind builders --------------------------------------------------------------------------- */

/* The seed's constraints on H and G (K = 32768 / G, R = 2H / G); a message names what is wrong. */
static mla_status check_hg(const char *what, long long H, long long G) {
    MLA_ARG_CHECK(H >= 512 && H <= OP_MAX_H && H % 512 == 0,
                  "%s: expected H a multiple of 512 in [512, %d], got %lld", what, OP_MAX_H, H);
    MLA_ARG_CHECK(G >= 1 && OP_COLS % G == 0,
                  "%s: expected G dividing 32768 (K = 32768 / G), got G = %lld", what, G);
    MLA_ARG_CHECK((OP_COLS / G) % 512 == 0,
                  "%s: expected K = 32768 / G a multiple of 512, got K = %lld (G = %lld)", what,
                  OP_COLS / G, G);
    MLA_ARG_CHECK((2 * H) % G == 0 && (2 * H / G) % 256 == 0,
                  "%s: expected R = 2H / G a multiple of 256, got 2H / G = %lld / %lld", what,
                  2 * H, G);
    return MLA_OK;
}

/* Reads and checks the (H, G) params of a spec. */
static mla_status spec_hg(const mla__spec *spec, long long *H, long long *G) {
    MLA_ARG_CHECK(spec->n_params == 2 && strcmp(spec->params[0].name, "H") == 0 &&
                      strcmp(spec->params[1].name, "G") == 0,
                  "%s: expected the parameters (H, G), got %d parameters", spec->kernel,
                  spec->n_params);
    *H = spec->params[0].value;
    *G = spec->params[1].value;
    return check_hg(spec->kernel, *H, *G);
}

static mla_status build(const mla__spec *spec, const char *entry, int bn, char *name_expr,
                        size_t size, mla__launch_info *launch) {
    long long H = 0, G = 0;
    MLA_FORWARD_IF_ERROR(spec_hg(spec, &H, &G));
    int n = snprintf(name_expr, size, "mla::dsv4::%s<%lld, %lld>", entry, H, G);
    MLA_RETURN_ERROR_IF(n < 0 || (size_t)n >= size, MLA_ERR_INTERNAL,
                        "%s: name expression buffer of %zu bytes too small", spec->kernel, size);
    launch->threads = OP_THREADS;
    launch->dynamic_smem = OP_SMEM_BYTES(bn);
    launch->cluster = 1;
    return MLA_OK;
}

mla_status mla__dsv4_output_proj_a_build(const mla__spec *spec, char *name_expr, size_t size,
                                         mla__launch_info *launch) {
    return build(spec, "output_proj_a_kernel", OP_BN_A, name_expr, size, launch);
}

mla_status mla__dsv4_output_proj_b_build(const mla__spec *spec, char *name_expr, size_t size,
                                         mla__launch_info *launch) {
    return build(spec, "output_proj_b_kernel", OP_BN_B, name_expr, size, launch);
}

/* The geometry of a stream kind, one place for the kind builder and the launch (mirrors
 * output_proj.cu's StreamCfgA / StreamCfgB): W rows per CTA (bn), K columns per stage (ks),
 * stages, the A scale table's row (sf_row) and whether the wgmma-rows consumer keeps its float
 * copy (ftable), the K slices per W block and the block's threads (consumer warps + the
 * producer warp). NT 1 / 2 (T <= 16): 64- / 32-row blocks, one slice (all K), kernel A at NT 1
 * on the wgmma-rows consumer (one consumer warpgroup, the float scale table), at NT 2 on
 * mma.sync, B on mma.sync (8 consumer warps); NT 4 / 8 (16 <
 * T <= 64): 128-row blocks in K slices of whole stages, both on the wgmma-rows consumer (two
 * consumer warpgroups). */
typedef struct stream_geom {
    int bn, ks, stages, ftable, slices, threads;
    long long sf_row;
} stream_geom;

static stream_geom stream_geom_a(long long G, int nt) {
    stream_geom g;
    if (nt >= 4) {
        g.bn = OP_W_BN, g.ks = OP_W_KS, g.sf_row = w_sf_row_a(G);
        g.stages = w_stages(nt, g.sf_row), g.ftable = 1, g.slices = w_slices_a(OP_COLS / G);
        g.threads = OP_S_THREADS;
    } else {
        g.bn = OP_S_BN_A, g.ks = OP_S_KS_A, g.sf_row = OP_COLS / G / 32;
        g.stages = stream_stages_a(nt), g.ftable = nt == 1, g.slices = 1;
        g.threads = nt == 1 ? OP_S_THREADS_A : OP_S_THREADS;
    }
    return g;
}
static stream_geom stream_geom_b(long long H, int nt) {
    stream_geom g;
    if (nt >= 4) {
        g.bn = OP_W_BN, g.ks = OP_W_KS, g.sf_row = w_sf_row_b(H);
        g.stages = w_stages(nt, g.sf_row), g.ftable = 1, g.slices = OP_W_SLICES_B;
    } else {
        g.bn = OP_S_BN_B, g.ks = stream_ks_b(nt), g.sf_row = 2 * H / 32;
        g.stages = stream_stages_b(nt), g.ftable = 0, g.slices = 1;
    }
    g.threads = OP_S_THREADS;
    return g;
}
static unsigned geom_smem(stream_geom g, int nt) {
    return (unsigned)stream_smem(g.bn, nt, g.ks, g.stages, g.sf_row, g.ftable);
}

/* The stream kinds: params (H, G, NT), NT in {1, 2, 4, 8} (b: 0 kernel A, 1 kernel B, 2 both
 * in one launch, NT 1 or 2: the two rings share one CTA's shared memory). */
static mla_status build_stream(const mla__spec *spec, int b, char *name_expr, size_t size,
                               mla__launch_info *launch) {
    MLA_ARG_CHECK(spec->n_params == 3 && strcmp(spec->params[0].name, "H") == 0 &&
                      strcmp(spec->params[1].name, "G") == 0 &&
                      strcmp(spec->params[2].name, "NT") == 0,
                  "%s: expected the parameters (H, G, NT), got %d parameters", spec->kernel,
                  spec->n_params);
    long long H = spec->params[0].value, G = spec->params[1].value, nt = spec->params[2].value;
    MLA_FORWARD_IF_ERROR(check_hg(spec->kernel, H, G));
    if (b == 2)
        MLA_ARG_CHECK(nt == 1 || nt == 2, "%s: expected NT (8-token tiles) 1 or 2, got %lld",
                      spec->kernel, nt);
    else
        MLA_ARG_CHECK(nt == 1 || nt == 2 || nt == 4 || nt == 8,
                      "%s: expected NT (8-token tiles) in {1, 2, 4, 8}, got %lld", spec->kernel,
                      nt);
    static const char *const entries[] = {"output_proj_a_stream_kernel",
                                          "output_proj_b_stream_kernel",
                                          "output_proj_stream_kernel"};
    int n = snprintf(name_expr, size, "mla::dsv4::%s<%lld, %lld, %lld>", entries[b], H, G, nt);
    MLA_RETURN_ERROR_IF(n < 0 || (size_t)n >= size, MLA_ERR_INTERNAL,
                        "%s: name expression buffer of %zu bytes too small", spec->kernel, size);
    const stream_geom ga = stream_geom_a(G, (int)nt), gb = stream_geom_b(H, (int)nt);
    const unsigned sa = geom_smem(ga, (int)nt), sb = geom_smem(gb, (int)nt);
    /* the one launch: the larger consumer count, then the producer warp (fused_threads) */
    launch->threads = b == 0 ? ga.threads : b == 1 ? gb.threads
                                                   : (ga.threads > gb.threads ? ga.threads
                                                                              : gb.threads);
    launch->dynamic_smem = b == 0 ? sa : b == 1 ? sb : sa + sb;
    launch->cluster = 1;
    return MLA_OK;
}

mla_status mla__dsv4_output_proj_a_stream_build(const mla__spec *spec, char *name_expr,
                                                size_t size, mla__launch_info *launch) {
    return build_stream(spec, 0, name_expr, size, launch);
}

mla_status mla__dsv4_output_proj_b_stream_build(const mla__spec *spec, char *name_expr,
                                                size_t size, mla__launch_info *launch) {
    return build_stream(spec, 1, name_expr, size, launch);
}

mla_status mla__dsv4_output_proj_stream_build(const mla__spec *spec, char *name_expr,
                                              size_t size, mla__launch_info *launch) {
    return build_stream(spec, 2, name_expr, size, launch);
}

/* ---- argument checks ------------------------------------------------------------------------- */

/* What the checks derive: tokens, hidden size, groups, RoPE table rows. */
typedef struct op_shape {
    int T;
    long long H, G, K, max_pos;
} op_shape;

/* A 2-D or 1-D tensor of given dtype and shape, contiguous and aligned. what explains the shape. */
static mla_status check_exact(const mla_runtime *rt, const DLTensor *t, const char *name,
                              mla__dtype dtype, int ndim, const int64_t *shape,
                              const char *const *what, unsigned align) {
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, t, name, dtype, ndim));
    for (int d = 0; d < ndim; d++)
        MLA_FORWARD_IF_ERROR(mla__check_dim(t, name, d, shape[d], what[d]));
    MLA_FORWARD_IF_ERROR(mla__check_contiguous(t, name));
    return mla__check_align(t, name, align);
}

/* q_or_x [T, 32768] bf16: sets T. */
static mla_status check_q_or_x(const mla_runtime *rt, const DLTensor *q, op_shape *sh) {
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, q, "q_or_x", MLA_DT_BF16, 2));
    MLA_ARG_CHECK(q->shape[0] >= 1 && q->shape[0] <= MLA_DSV4_MAX_TOKENS,
                  "q_or_x: expected T = shape[0] in [1, %d], got %lld", MLA_DSV4_MAX_TOKENS,
                  (long long)q->shape[0]);
    MLA_FORWARD_IF_ERROR(mla__check_dim(q, "q_or_x", 1, OP_COLS, "64 heads x 512"));
    MLA_FORWARD_IF_ERROR(mla__check_contiguous(q, "q_or_x"));
    MLA_FORWARD_IF_ERROR(mla__check_align(q, "q_or_x", 16));
    sh->T = (int)q->shape[0];
    return MLA_OK;
}

/* positions [T] int32, freqs_real [max_pos, 64] fp32: sets max_pos. */
static mla_status check_rope(const mla_runtime *rt, const mla_output_proj_args *a, op_shape *sh) {
    static const char *const pos_what[] = {"T of q_or_x"};
    const int64_t pos_shape[1] = {sh->T};
    MLA_FORWARD_IF_ERROR(check_exact(rt, a->positions, "positions", MLA_DT_INT32, 1, pos_shape,
                                     pos_what, 4));
    const DLTensor *f = a->freqs_real;
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, f, "freqs_real", MLA_DT_FP32, 2));
    MLA_ARG_CHECK(f->shape[0] >= 1 && f->shape[0] <= (1LL << 31) - 1,
                  "freqs_real: expected max_pos = shape[0] in [1, 2^31), got %lld",
                  (long long)f->shape[0]);
    MLA_FORWARD_IF_ERROR(mla__check_dim(f, "freqs_real", 1, OP_ROPE, "32 (cos, sin) pairs"));
    MLA_FORWARD_IF_ERROR(mla__check_contiguous(f, "freqs_real"));
    MLA_FORWARD_IF_ERROR(mla__check_align(f, "freqs_real", 16));
    sh->max_pos = (long long)f->shape[0];
    return MLA_OK;
}

/* wo_a_weight [2H, K] fp8: sets H, K and G (the seed's constraints). */
static mla_status check_wo_a(const mla_runtime *rt, const DLTensor *w, op_shape *sh) {
    MLA_FORWARD_IF_ERROR(mla__check_tensor(rt, w, "wo_a_weight", MLA_DT_FP8_E4M3, 2));
    long long rows = (long long)w->shape[0], k = (long long)w->shape[1];
    MLA_ARG_CHECK(rows % 2 == 0 && rows / 2 >= 512 && rows / 2 <= OP_MAX_H && rows / 2 % 512 == 0,
                  "wo_a_weight: expected shape[0] = 2H with H a multiple of 512 in [512, %d], "
                  "got %lld", OP_MAX_H, rows);
    MLA_ARG_CHECK(k >= 1 && OP_COLS % k == 0,
                  "wo_a_weight: expected shape[1] = K with K * G == 32768 for an integer G, "
                  "got %lld", k);
    MLA_FORWARD_IF_ERROR(check_hg("wo_a_weight", rows / 2, OP_COLS / k));
    MLA_FORWARD_IF_ERROR(mla__check_contiguous(w, "wo_a_weight"));
    MLA_FORWARD_IF_ERROR(mla__check_align(w, "wo_a_weight", 16));
    sh->H = rows / 2, sh->K = k, sh->G = OP_COLS / k;
    return MLA_OK;
}

/* wo_a_sf, wo_b_weight, wo_b_sf against H and K. */
static mla_status check_weights(const mla_runtime *rt, const mla_output_proj_args *a,
                                const op_shape *sh) {
    static const char *const sfa_what[] = {"2H of wo_a_weight", "K / 32 of wo_a_weight"};
    static const char *const wb_what[] = {"H = wo_a_weight rows / 2", "2H"};
    static const char *const sfb_what[] = {"H = wo_a_weight rows / 2", "2H / 32"};
    const int64_t sfa[2] = {2 * sh->H, sh->K / 32}, wb[2] = {sh->H, 2 * sh->H};
    const int64_t sfb[2] = {sh->H, 2 * sh->H / 32};
    MLA_FORWARD_IF_ERROR(check_exact(rt, a->wo_a_sf, "wo_a_sf", MLA_DT_UINT8, 2, sfa, sfa_what,
                                     16));
    MLA_FORWARD_IF_ERROR(check_exact(rt, a->wo_b_weight, "wo_b_weight", MLA_DT_FP8_E4M3, 2, wb,
                                     wb_what, 16));
    return check_exact(rt, a->wo_b_sf, "wo_b_sf", MLA_DT_UINT8, 2, sfb, sfb_what, 16);
}

/* out [T, H] bf16; attn_sink [64] fp32 or NULL; c128_attn_len [T] int32 or NULL. */
static mla_status check_out_and_options(const mla_runtime *rt, const mla_output_proj_args *a,
                                        const op_shape *sh) {
    static const char *const out_what[] = {"T of q_or_x", "H = wo_a_weight rows / 2"};
    static const char *const sink_what[] = {"64 heads"};
    static const char *const len_what[] = {"T of q_or_x"};
    const int64_t out[2] = {sh->T, sh->H}, sink[1] = {OP_HEADS}, len[1] = {sh->T};
    MLA_FORWARD_IF_ERROR(check_exact(rt, a->out, "out", MLA_DT_BF16, 2, out, out_what, 4));
    if (a->attn_sink != NULL)
        MLA_FORWARD_IF_ERROR(check_exact(rt, a->attn_sink, "attn_sink", MLA_DT_FP32, 1, sink,
                                         sink_what, 4));
    if (a->c128_attn_len != NULL)
        MLA_FORWARD_IF_ERROR(check_exact(rt, a->c128_attn_len, "c128_attn_len", MLA_DT_INT32, 1,
                                         len, len_what, 4));
    return MLA_OK;
}

/* The workspace holds the regions of mla__dsv4_layout(T, H, G). */
static mla_status check_workspace(const mla_runtime *rt, const DLTensor *ws, const op_shape *sh,
                                  mla__dsv4_ws_layout *layout) {
    MLA_FORWARD_IF_ERROR(mla__dsv4_check_workspace(rt, ws, 0));
    mla__dsv4_layout(sh->T, sh->H, sh->G, layout);
    MLA_ARG_CHECK(ws->shape[0] >= (int64_t)layout->total,
                  "workspace: expected at least %zu bytes (mla_workspace_size for T = %d, "
                  "H = %lld, G = %lld), got %lld bytes", layout->total, sh->T, sh->H, sh->G,
                  (long long)ws->shape[0]);
    return MLA_OK;
}

static mla_status check_args(const mla_runtime *rt, const mla_output_proj_args *a, op_shape *sh,
                             mla__dsv4_ws_layout *layout) {
    MLA_ARG_CHECK(a != NULL, "args: expected mla_output_proj_args, got NULL");
    MLA_ARG_CHECK(a->struct_size == sizeof *a, "args: expected struct_size %zu "
                  "(sizeof(mla_output_proj_args), set by mla_output_proj_args_init), got %zu",
                  sizeof *a, a->struct_size);
    MLA_FORWARD_IF_ERROR(check_q_or_x(rt, a->q_or_x, sh));
    MLA_FORWARD_IF_ERROR(check_rope(rt, a, sh));
    MLA_FORWARD_IF_ERROR(check_wo_a(rt, a->wo_a_weight, sh));
    MLA_FORWARD_IF_ERROR(check_weights(rt, a, sh));
    MLA_FORWARD_IF_ERROR(check_out_and_options(rt, a, sh));
    return check_workspace(rt, a->workspace, sh, layout);
}

/* ---- launches -------------------------------------------------------------------------------- */

/* Kernel A's argument struct (oproj::ArgsA: the same fields in the same order, 8 bytes each). */
typedef struct op_args_a {
    CUdeviceptr q_or_x, positions, freqs, part_o, part_lse, sink;
    CUdeviceptr act_q, act_sf, wo_a, wo_a_sf, o_lora, o_lora_q, o_lora_sf, bank, part;
    long long T, max_pos, split, units_per_qtile, n_qtiles, kslices, slice_steps;
} op_args_a;

/* Kernel B's (oproj::ArgsB). */
typedef struct op_args_b {
    CUdeviceptr o_lora_q, o_lora_sf, wo_b, wo_b_sf, out, bank, part;
    long long T, bank_words, slice_steps, pf_a_steps, pf_b_steps;
} op_args_b;

/* Units (token, head) per quantize item: about OP_QUANT_WAVES items per SM, whole warps. */
static long long units_per_item(int T, int sm_count, int waves) {
    long long units = (long long)T * OP_HEADS;
    long long items = (long long)waves * (sm_count > 0 ? sm_count : 1);
    long long per = (units + items - 1) / items;
    per = (per + OP_QUANT_WARPS - 1) / OP_QUANT_WARPS * OP_QUANT_WARPS;
    return per;
}

/* K slices per GEMM tile and K-steps (of 128) per slice: with one m-tile (T <= 64) and fewer
 * than OP_SPLIT_CTAS_PER_SM tiles per SM, each tile's K is cut so that tiles * slices is at most
 * that many per SM (at most OP_KSLICES slices, none empty); else one slice of all K-steps. */
static void split_k(int T, long long n_tiles, long long ksteps, int sm_count, long long *slices,
                    long long *steps) {
    long long s = (long long)OP_SPLIT_CTAS_PER_SM * (sm_count > 0 ? sm_count : 1) / n_tiles;
    if (T > OP_BM || s < 1) s = 1;
    if (s > OP_KSLICES) s = OP_KSLICES;
    if (s > ksteps) s = ksteps;
    *steps = (ksteps + s - 1) / s;
    *slices = (ksteps + *steps - 1) / *steps;
}

static void fill_args(const mla_runtime *rt, const mla_output_proj_args *a, const op_shape *sh,
                      const mla__dsv4_ws_layout *L, op_args_a *A, op_args_b *B) {
    CUdeviceptr ws = mla__data(a->workspace);
    int kind = a->c128_attn_len != NULL ? MLA__DSV4_HCA : MLA__DSV4_SWA;
    long long units = (long long)sh->T * OP_HEADS;
    memset(A, 0, sizeof *A);
    A->q_or_x = mla__data(a->q_or_x), A->positions = mla__data(a->positions);
    A->freqs = mla__data(a->freqs_real);
    A->part_o = ws + L->part_o, A->part_lse = ws + L->part_lse;
    A->sink = a->attn_sink != NULL ? mla__data(a->attn_sink) : 0;
    A->act_q = ws + L->act_q, A->act_sf = ws + L->act_sf;
    A->wo_a = mla__data(a->wo_a_weight), A->wo_a_sf = mla__data(a->wo_a_sf);
    A->o_lora = ws + L->o_lora, A->o_lora_q = ws + L->o_lora_q, A->o_lora_sf = ws + L->o_lora_sf;
    A->bank = ws + mla__dsv4_bank_offset(kind), A->part = ws + L->part_op;
    A->T = sh->T, A->max_pos = sh->max_pos, A->split = mla__dsv4_kv_splits(rt, (int)sh->T, kind == MLA__DSV4_HCA);
    /* The tiled kernel A's quantize items (the stream kernel A, T <= 16, quantizes the units in
     * its GEMM CTAs and does not read these two). */
    A->units_per_qtile = units_per_item(sh->T, rt->sm_count,
                                        sh->T <= OP_S_TOKENS ? 1 : OP_QUANT_WAVES);
    A->n_qtiles = (units + A->units_per_qtile - 1) / A->units_per_qtile;
    split_k(sh->T, 2 * sh->H / OP_BN_A, sh->K / 128, rt->sm_count, &A->kslices,
            &A->slice_steps);
    memset(B, 0, sizeof *B);
    B->o_lora_q = A->o_lora_q, B->o_lora_sf = A->o_lora_sf;
    B->wo_b = mla__data(a->wo_b_weight), B->wo_b_sf = mla__data(a->wo_b_sf);
    B->out = mla__data(a->out), B->bank = A->bank, B->part = A->part;
    B->T = sh->T, B->bank_words = OP_BANK_ZERO_WORDS;
}

static mla_status get_kernel(mla_runtime *rt, const char *kind, const op_shape *sh, int nt,
                             const mla__kernel **k) {
    mla__spec spec;
    mla__spec_init(&spec, kind);
    MLA_FORWARD_IF_ERROR(mla__spec_add(&spec, "H", sh->H));
    MLA_FORWARD_IF_ERROR(mla__spec_add(&spec, "G", sh->G));
    if (nt > 0) MLA_FORWARD_IF_ERROR(mla__spec_add(&spec, "NT", nt));
    return mla__get_kernel(rt, &spec, k);
}

/* T <= 16: kernels A and B as one launch (dsv4_output_proj_stream) by default at 8 < T <= 16
 * (NT 2; OP_FUSED_DEFAULT_NT, without its L2 prefetches: measured SWA T 16 75.2 -> 70.6 us, HCA
 * 94.2 -> 89.1, docs/perf-notes.md fourteenth session; at T <= 8 the two kernels, with kernel A
 * on the wgmma-rows consumer, were faster: SWA T1 61.7 against 62.6) unless MLAJIT_DSV4_OUTPROJ
 * is "split", and at any T <= 16 when it is "fused", "fused-pfb" or "fused-nopf"; only where
 * the grid fits the SMs at one CTA per SM (its CTAs wait for every CTA's o_lora block, so all
 * must be resident at once) and both rings fit one CTA's shared memory (at small H / G the
 * scale tables are larger: then the two kernels). */
#define OP_FUSED_DEFAULT_NT 2
static int use_fused(const mla_runtime *rt, unsigned ctas, int nt, unsigned smem) {
    int v = rt->dsv4_outproj;
    int asked = v == 2 || v == 4 || v == 5 || v == 6 || v == 8;
    int want = asked || (v != 1 && nt == OP_FUSED_DEFAULT_NT);
    return want && rt->sm_count > 0 && ctas <= (unsigned)rt->sm_count &&
           smem <= OP_W_SMEM_LIMIT;
}
/* Its L2 prefetches, in K-steps after each ring's (clamped to the block's): of wo_a at the start,
 * of wo_b once wo_a is issued. "fused" (and "fused,pdl", "fused,stream64"): every step of both
 * blocks; "fused-pfb": 6 wo_b steps (request dsv4o/1's "fused"); "fused-nopf" and the default:
 * none. */
#define OP_PF_ALL (1 << 20)
static void fused_prefetch(const mla_runtime *rt, op_args_b *B) {
    int v = rt->dsv4_outproj;
    int all = v == 2 || v == 6 || v == 8;
    B->pf_a_steps = all ? OP_PF_ALL : 0;
    B->pf_b_steps = all ? OP_PF_ALL : (v == 5 ? 6 : 0);
}

/* 16 < T <= 64 on the stream kernels with K slices per W block (OP_W_*: partials and the
 * last slice's sum in the kernels) when MLAJIT_DSV4_OUTPROJ is "stream64" or "fused,stream64"
 * (OP_STREAM64_DEFAULT: the default unless it is "split", "pdl" or "fused,pdl"); else the tiled
 * kernels. */
#define OP_STREAM64_DEFAULT 1
static int use_stream64(const mla_runtime *rt, int T) {
    int v = rt->dsv4_outproj;
    int want = v == 7 || v == 8 || (OP_STREAM64_DEFAULT && v != 1 && v != 3 && v != 6);
    return T > OP_S_TOKENS && T <= OP_BM && want;
}

/* The stream kernels (T <= 16: no split-K; 16 < T <= 64: grid y = K slices), each with its TMA
 * descriptors (second parameter, by value), both programmatic dependents (the bank needs no
 * memset: kernel B leaves words [0, 128) zeroed and the split counters reset themselves). */
static mla_status launch_stream(mla_runtime *rt, const op_shape *sh, op_args_a *A, op_args_b *B,
                                CUstream stream) {
    const mla__kernel *ka = NULL, *kb = NULL;
    int nt = stream_nt(sh->T);
    const stream_geom ga = stream_geom_a(sh->G, nt), gb = stream_geom_b(sh->H, nt);
    mla__dsv4_maps ma, mb;
    MLA_FORWARD_IF_ERROR(mla__dsv4_stream_maps(rt, &ma, A->wo_a, sh->K, 2 * sh->H, sh->K, ga.bn,
                                               A->act_q, OP_COLS, sh->T, OP_COLS, 8 * nt,
                                               A->wo_a_sf, ga.ks / 128));
    MLA_FORWARD_IF_ERROR(mla__dsv4_stream_maps(rt, &mb, B->wo_b, 2 * sh->H, sh->H, 2 * sh->H,
                                               gb.bn, B->o_lora_q, 2 * sh->H, sh->T, 2 * sh->H,
                                               8 * nt, B->wo_b_sf, gb.ks / 128));
    A->kslices = ga.slices, A->slice_steps = sh->K / 128 / ga.slices;
    B->slice_steps = 2 * sh->H / 128 / gb.slices;
    /* One CTA per W block of wo_a (and slice); they quantize the units themselves (n_qtiles
     * unused). */
    unsigned a_items = (unsigned)(2 * sh->H / ga.bn);
    if (ga.slices == 1 && use_fused(rt, a_items, nt, geom_smem(ga, nt) + geom_smem(gb, nt))) {
        const mla__kernel *k = NULL;
        MLA_FORWARD_IF_ERROR(get_kernel(rt, "dsv4_output_proj_stream", sh, nt, &k));
        fused_prefetch(rt, B);
        mla__log(rt, MLA_LOG_DEBUG, "mla_output_proj: T %d, kernels A and B in one launch", sh->T);
        void *args[] = {A, B, &ma, &mb};
        return mla__launch_pdl(rt, k, a_items, 1, 1, stream, args);
    }
    MLA_FORWARD_IF_ERROR(get_kernel(rt, "dsv4_output_proj_a_stream", sh, nt, &ka));
    MLA_FORWARD_IF_ERROR(get_kernel(rt, "dsv4_output_proj_b_stream", sh, nt, &kb));
    void *args_a[] = {A, &ma};
    MLA_FORWARD_IF_ERROR(
        mla__launch_pdl(rt, ka, a_items, (unsigned)ga.slices, 1, stream, args_a));
    void *args_b[] = {B, &mb};
    return mla__launch_pdl(rt, kb, (unsigned)(sh->H / gb.bn), (unsigned)gb.slices, 1, stream,
                           args_b);
}

static mla_status launch_all(mla_runtime *rt, const op_shape *sh, op_args_a *A, op_args_b *B,
                             CUstream stream) {
    const mla__kernel *ka = NULL, *kb = NULL;
    if (sh->T <= OP_S_TOKENS || use_stream64(rt, sh->T))
        return launch_stream(rt, sh, A, B, stream);
    MLA_FORWARD_IF_ERROR(get_kernel(rt, "dsv4_output_proj_a", sh, 0, &ka));
    MLA_FORWARD_IF_ERROR(get_kernel(rt, "dsv4_output_proj_b", sh, 0, &kb));
    unsigned m_tiles = (unsigned)((sh->T + OP_BM - 1) / OP_BM);
    unsigned a_items = (unsigned)A->n_qtiles +
                       m_tiles * (unsigned)(2 * sh->H / OP_BN_A) * (unsigned)A->kslices;
    long long b_slices = 1;
    split_k(sh->T, sh->H / OP_BN_B, 2 * sh->H / 128, rt->sm_count, &b_slices, &B->slice_steps);
    /* T > 16: kernel A behind a memset of the bank, not a programmatic dependent (measured in
     * request dsv4p/3: with PDL the T 64 layer's out-proj part took ~11 µs longer, not
     * separated from the other changes of that run; the T <= 16 stream path gained 3.8 µs). */
    void *args_a[] = {A};
    if (rt->dsv4_outproj == 3 || rt->dsv4_outproj == 6) {  /* "pdl", "fused,pdl" */
        MLA_FORWARD_IF_ERROR(mla__launch_pdl(rt, ka, a_items, 1, 1, stream, args_a));
    } else {
        MLA_CU(rt, cuMemsetD8Async(A->bank, 0, MLA__DSV4_BANK_BYTES, stream));
        MLA_FORWARD_IF_ERROR(mla__launch(rt, ka, a_items, 1, 1, stream, args_a));
    }
    void *args_b[] = {B};
    return mla__launch_pdl(rt, kb, (unsigned)(sh->H / OP_BN_B), m_tiles, (unsigned)b_slices,
                           stream, args_b);
}

/* ---- the API --------------------------------------------------------------------------------- */

void mla_output_proj_args_init(mla_output_proj_args *args) {
    if (args == NULL) return;
    memset(args, 0, sizeof *args);
    args->struct_size = sizeof *args;
}

mla_status mla_output_proj(mla_runtime *runtime, const mla_output_proj_args *args,
                           CUstream stream) {
    MLA_ARG_CHECK(runtime != NULL, "runtime: expected a runtime, got NULL");
    op_shape sh = {0};
    mla__dsv4_ws_layout layout;
    MLA_FORWARD_IF_ERROR(check_args(runtime, args, &sh, &layout));
    MLA_FORWARD_IF_ERROR(mla__runtime_enter(runtime));
    op_args_a A;
    op_args_b B;
    fill_args(runtime, args, &sh, &layout, &A, &B);
    return launch_all(runtime, &sh, &A, &B, stream);
}
