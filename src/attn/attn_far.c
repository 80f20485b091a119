/* Far keys at trained distances (attn_far.h). */
#include "attn/attn_far.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

static const char *const far_names[SUBQ_FAR_COUNT] = {"none", "window", "order", "group"};

int attn_far_parse(const char *name) {
    for (int i = 0; name && i < SUBQ_FAR_COUNT; i++)
        if (!strcmp(name, far_names[i])) return i;
    return -1;
}

const char *attn_far_name(subq_far_pos s) { return (int)s >= 0 && s < SUBQ_FAR_COUNT ? far_names[s] : "?"; }

static int cmp_u64(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int attn_far_shifts(const attn_far *f, const int32_t *dist, int n, int base, int32_t *shift, int64_t *scratch) {
    const int F = f->from;
    int n_far = 0, d_max = 0;
    for (int j = 0; j < n; j++) {
        shift[j] = 0;
        if (f->scheme == SUBQ_FAR_NONE || dist[j] <= F) continue;
        n_far++;
        d_max = dist[j] > d_max ? dist[j] : d_max;
    }
    if (!n_far) return 0;
    switch (f->scheme) {
    case SUBQ_FAR_WINDOW: /* d' = from */
        for (int j = 0; j < n; j++)
            if (dist[j] > F) shift[j] = dist[j] - F;
        break;
    case SUBQ_FAR_GROUP: { /* d' = from + ceil((d - from) / G), G = ceil((d_max - from) / (limit - from)) */
        const int64_t room = f->limit - F, G = (d_max - F + room - 1) / room;
        for (int j = 0; j < n; j++)
            if (dist[j] > F) shift[j] = dist[j] - (F + (int32_t)((dist[j] - F + G - 1) / G));
        break;
    }
    case SUBQ_FAR_ORDER: { /* every placed key at base + (n - 1 - r), r its rank by distance, farthest first
                              (ties: list order) */
        for (int j = 0; j < n; j++)
            scratch[j] = (int64_t)((uint64_t)(uint32_t)(INT32_MAX - dist[j]) << 32 | (uint32_t)j);
        qsort(scratch, (size_t)n, sizeof *scratch, cmp_u64);
        for (int r = 0; r < n; r++) {
            const int j = (int)(uint32_t)scratch[r];
            shift[j] = dist[j] - (base + (n - 1 - r));
        }
        break;
    }
    default:
        break;
    }
    return n_far;
}

void attn_far_distances(const kv_cache *kv, int q_slot, const int *slots, int n, int32_t *dist) {
    const int32_t pq = kv->pos[q_slot];
    for (int j = 0; j < n; j++) dist[j] = pq - kv->pos[slots[j]];
}

size_t attn_rope_turns_size(int half) { return (size_t)ATTN_TURN_LEVELS * ATTN_TURN_DIGITS * 2 * (size_t)half; }

/* row (l, d): cos (d 256^l freq[i]) for i < half, then the sines */
void attn_rope_turns_fill(const double *freq, int half, double *turns) {
    for (int l = 0; l < ATTN_TURN_LEVELS; l++)
        for (int d = 0; d < ATTN_TURN_DIGITS; d++) {
            double *c = turns + ((size_t)l * ATTN_TURN_DIGITS + d) * 2 * half, *s = c + half;
            for (int i = 0; i < half; i++) {
                const double a = ldexp((double)d, 8 * l) * freq[i];
                c[i] = cos(a), s[i] = sin(a);
            }
        }
}

/* cos and sin of pair i's angle shift * freq[i], in double (shifts reach
 * 1M positions, where a float angle is off by radians):
 *   |shift| = sum_l d_l 256^l,  e^(i a) = prod_l e^(i d_l 256^l freq)
 * from the tables, else by cos and sin of the angle. */
static void turn_of(const attn_rope *r, int32_t shift, double *c, double *s) {
    const int half = r->n_rot / 2;
    if (!r->turns) {
        for (int i = 0; i < half; i++) {
            const double a = (double)shift * r->freq[i];
            c[i] = cos(a), s[i] = sin(a);
        }
        return;
    }
    const uint32_t u = shift < 0 ? 0u - (uint32_t)shift : (uint32_t)shift;
    for (int i = 0; i < half; i++) c[i] = 1.0, s[i] = 0.0;
    for (int l = 0; l < ATTN_TURN_LEVELS; l++) {
        const uint32_t d = (u >> (8 * l)) & (ATTN_TURN_DIGITS - 1);
        if (!d) continue;
        const double *tc = r->turns + ((size_t)l * ATTN_TURN_DIGITS + d) * 2 * half, *ts = tc + half;
        for (int i = 0; i < half; i++) {
            const double cn = c[i] * tc[i] - s[i] * ts[i];
            s[i] = s[i] * tc[i] + c[i] * ts[i], c[i] = cn;
        }
    }
    if (shift < 0)
        for (int i = 0; i < half; i++) s[i] = -s[i];
}

void attn_rope_rotate(const attn_rope *r, float *x, int32_t shift) {
    const int half = r->n_rot / 2;
    double c[KV_MAX_HEAD_DIM / 2], s[KV_MAX_HEAD_DIM / 2];
    turn_of(r, shift, c, s);
    for (int i = 0; i < half; i++) {
        const int i0 = r->neox ? i : 2 * i, i1 = r->neox ? i + half : 2 * i + 1;
        const float x0 = x[i0], x1 = x[i1], cf = (float)c[i], sf = (float)s[i];
        x[i0] = x0 * cf - x1 * sf;
        x[i1] = x0 * sf + x1 * cf;
    }
}

void attn_far_rescore(const attn_rope *r, const kv_cache *kv, int layer, int kh, int g, const float *q, float scale,
                      const int *slots, const int32_t *shift, int n, float *s, int ld) {
    if (!r || r->n_rot <= 0) return; /* a layer without RoPE: distances change nothing */
    const int hd = kv->head_dim;
    const kernels *K = kernels_get();
    float k[KV_MAX_HEAD_DIM];
    for (int j = 0; j < n; j++) {
        if (!shift[j]) continue;
        kv_cache_row_f32(kv, kv_cache_key(kv, layer, kh, slots[j]), k);
        attn_rope_rotate(r, k, shift[j]);
        for (int i = 0; i < g; i++) s[(size_t)i * ld + j] = scale * K->dot_f32(q + (size_t)i * hd, k, hd);
    }
}
