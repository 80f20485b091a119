/* k-th largest (kth.h): quickselect, after a histogram pass for long arrays. */
#include "base/kth.h"

#include <stdint.h>
#include <string.h>

/* larger values to the front until position k - 1 holds its value */
static float quickselect(float *a, int n, int k) {
    int lo = 0, hi = n - 1, want = k - 1;
    while (lo < hi) {
        float pivot = a[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (a[i] > pivot) i++;
            while (a[j] < pivot) j--;
            if (i <= j) {
                float t = a[i];
                a[i++] = a[j], a[j--] = t;
            }
        }
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else break;
    }
    return a[want];
}

/* A float's bits as an unsigned key in the float's order (no NaN). */
static uint32_t order_key(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u & 0x80000000u ? ~u : u | 0x80000000u;
}

/* Long arrays: a histogram of the keys' top 11 bits (sign, exponent, two
 * mantissa bits) finds the bin that holds the k-th largest in one
 * branch-free pass; quickselect then runs over that bin's values only. */
#define KTH_BINS 2048
#define KTH_HIST_MIN 1024
float kth_largest_f32(float *a, int n, int k) {
    if (n < KTH_HIST_MIN) return quickselect(a, n, k);
    int hist[KTH_BINS] = {0};
    for (int i = 0; i < n; i++) hist[order_key(a[i]) >> 21]++;
    int bin = KTH_BINS - 1, above = 0;
    while (above + hist[bin] < k) above += hist[bin--];
    int m = 0;
    for (int i = 0; i < n; i++)
        if ((int)(order_key(a[i]) >> 21) == bin) a[m++] = a[i];
    return quickselect(a, m, k - above);
}
