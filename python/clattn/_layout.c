/*
 * The layout probe of the Python package: the size of each public struct and the offset of each
 * of its fields, as the C compiler lays them out from clattn.h. The package's ctypes mirrors of
 * the structs are compared with this table at import, so a field added to clattn.h without its
 * mirror is an ImportError, not memory written at the wrong place.
 */
#include "clattn.h"

#include <stddef.h>

typedef struct {
    const char *type, *field; /* field NULL: the row gives sizeof(type) */
    size_t value;
} layout_row;

#define SIZE(T) {#T, NULL, sizeof(T)}
#define FIELD(T, F) {#T, #F, offsetof(T, F)}

static const layout_row rows[] = {
    SIZE(clattn_tensor), FIELD(clattn_tensor, buf), FIELD(clattn_tensor, offset),
    FIELD(clattn_tensor, ndim), FIELD(clattn_tensor, dims), FIELD(clattn_tensor, dtype),
    SIZE(clattn_params), FIELD(clattn_params, device), FIELD(clattn_params, tuning),
    FIELD(clattn_params, kernel_dir), FIELD(clattn_params, cache_dir), FIELD(clattn_params, sync),
    FIELD(clattn_params, tune_file),
    SIZE(clattn_mask), FIELD(clattn_mask, valid_lens), FIELD(clattn_mask, valid_lens_host),
    FIELD(clattn_mask, lens_ndim), FIELD(clattn_mask, lens_dims), FIELD(clattn_mask, mask),
    FIELD(clattn_mask, causal), FIELD(clattn_mask, fill), FIELD(clattn_mask, align),
    FIELD(clattn_mask, window), FIELD(clattn_mask, window_left), FIELD(clattn_mask, window_right),
    SIZE(clattn_dropout_params), FIELD(clattn_dropout_params, p),
    FIELD(clattn_dropout_params, training), FIELD(clattn_dropout_params, seed),
    FIELD(clattn_dropout_params, offset),
    SIZE(clattn_attention_opts), FIELD(clattn_attention_opts, mask),
    FIELD(clattn_attention_opts, dropout), FIELD(clattn_attention_opts, scale),
    FIELD(clattn_attention_opts, lse), FIELD(clattn_attention_opts, bias),
    FIELD(clattn_attention_opts, alibi_slopes), FIELD(clattn_attention_opts, saved),
    SIZE(clattn_kv_cache), FIELD(clattn_kv_cache, k_cache), FIELD(clattn_kv_cache, v_cache),
    FIELD(clattn_kv_cache, lens), FIELD(clattn_kv_cache, k_new), FIELD(clattn_kv_cache, v_new),
    FIELD(clattn_kv_cache, advance),
    SIZE(clattn_additive_weights), FIELD(clattn_additive_weights, W_q),
    FIELD(clattn_additive_weights, W_k), FIELD(clattn_additive_weights, w_v),
    SIZE(clattn_mha_weights), FIELD(clattn_mha_weights, num_heads),
    FIELD(clattn_mha_weights, W_q), FIELD(clattn_mha_weights, W_k),
    FIELD(clattn_mha_weights, W_v), FIELD(clattn_mha_weights, W_o),
    FIELD(clattn_mha_weights, b_q), FIELD(clattn_mha_weights, b_k),
    FIELD(clattn_mha_weights, b_v), FIELD(clattn_mha_weights, b_o),
    FIELD(clattn_mha_weights, num_kv_heads),
    SIZE(clattn_attention_grads), FIELD(clattn_attention_grads, dQ),
    FIELD(clattn_attention_grads, dK), FIELD(clattn_attention_grads, dV),
    FIELD(clattn_attention_grads, dbias),
    SIZE(clattn_mha_grads), FIELD(clattn_mha_grads, dqueries), FIELD(clattn_mha_grads, dkeys),
    FIELD(clattn_mha_grads, dvalues), FIELD(clattn_mha_grads, dW_q),
    FIELD(clattn_mha_grads, dW_k), FIELD(clattn_mha_grads, dW_v), FIELD(clattn_mha_grads, dW_o),
    FIELD(clattn_mha_grads, db_q), FIELD(clattn_mha_grads, db_k), FIELD(clattn_mha_grads, db_v),
    FIELD(clattn_mha_grads, db_o), FIELD(clattn_mha_grads, dbias),
    SIZE(clattn_additive_grads), FIELD(clattn_additive_grads, dqueries),
    FIELD(clattn_additive_grads, dkeys), FIELD(clattn_additive_grads, dvalues),
    FIELD(clattn_additive_grads, dW_q), FIELD(clattn_additive_grads, dW_k),
    FIELD(clattn_additive_grads, dw_v),
};

/* Row i of the table, or 0 past its end. */
CLATTN_API int clattn_py_layout(int i, const char **type, const char **field, size_t *value)
{
    if (i < 0 || (size_t)i >= sizeof rows / sizeof rows[0])
        return 0;
    *type = rows[i].type;
    *field = rows[i].field;
    *value = rows[i].value;
    return 1;
}
