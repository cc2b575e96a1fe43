/* One block of a Lloyd pass, fused: each row's nearest centre, its squared distance and its
 * share of the M-step sums, in one loop over the rows (see rbfkm_engine/native.py).
 *
 * A row's partial distances are p_j = ||c_j||^2 - 2 x.c_j (the squared distance less the
 * row's constant ||x||^2, the same expansion as the torch passes), either computed here
 * ("direct", for few features: from CT = -2 C^T, d x kp, the factor folded in so the row's
 * features are broadcast straight from memory; doubling is exact, so the sums are those of
 * -2 x.c; ROWS rows at a time against GROUPS vectors of centres, so the FMAs of a row do
 * not wait on each other and each load of CT serves ROWS rows) or read from a block the
 * caller filled by a GEMM. The nearest centre is the lowest index of the minimum (as
 * torch.argmin), kept per SIMD lane and reduced at the end, so no row is scanned twice.
 *
 * Modes: 0 adds every row to the sums of its new cluster; 1 moves the rows whose label
 * changed between the sums (the caller keeps sums between passes); 2 labels only.
 * Sums are float64 whatever the data's type. lloyd_bounded is the same pass with Hamerly's
 * bounds (rbfkm_engine/bounds.py); lloyd_update is the M-step from a pass's sums (the
 * centres, their shift and the inertia: a dozen torch ops in one call); soft_block is a
 * block of an entmax15 pass, and row_minima and entmax15_rows serve the soft passes that
 * stay in torch; hartigan_sweep the local search.
 * No allocation, no global state: blocks run on the caller's threads at once.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Rows and groups of LANES centres a direct pass computes at once: ROWS x GROUPS sums in
 * registers. */
#define ROWS 4
#define GROUPS 2
/* Loops over ROWS, GROUPS and LANES unrolled in full: their sums then live in registers
 * (GCC's tunings for AMD Zen unroll less and keep a row's accumulators in memory). */
#define UNROLL _Pragma("GCC unroll 16")
/* Rows whose moved bounds a warm bounded pass tests at a time, before it labels the few
 * that fail (lloyd_bounded). */
#define BOUND_SPAN 256
/* The machine epsilon of T, and the largest value of the signed integer type I. */
#define EPS_OF(T) ((T)(sizeof(T) == sizeof(float) ? FLT_EPSILON : DBL_EPSILON))
#define INDEX_MAX(I) ((I)((((uint64_t)1) << (sizeof(I) * 8 - 1)) - 1))
/* a * b + c in T, rounded once where the target fuses multiply-adds, else twice. Every sum
 * of partial distances goes through it (mul_add for vectors): a compiler left to fuse
 * `acc += x * ct` may fuse one loop's chain and not another's (GCC's tunings for AMD Zen
 * avoid chains of FMAs), and the passes from neighbour lists must match full scans. */
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
#define MUL_ADD(T, a, b, c)                                                                    \
    (sizeof(T) == sizeof(float) ? (T)fmaf((float)(a), (float)(b), (float)(c))                  \
                                : (T)fma((double)(a), (double)(b), (double)(c)))
#else
#define MUL_ADD(T, a, b, c) ((a) * (b) + (c))
#endif
/* The square root of x in T's own precision (a float's root through a double rounds to
 * the same float, at twice the latency). */
#define ROOT(T, x) (sizeof(T) == sizeof(float) ? (T)sqrtf((float)(x)) : (T)sqrt((double)(x)))
/* The next T after x towards dir. */
#define NEXT_TOWARD(T, x, dir)                                                                 \
    (sizeof(T) == sizeof(float) ? (T)nextafterf((float)(x), (float)(dir))                      \
                                : (T)nextafter((double)(x), (double)(dir)))

#define LLOYD_KERNELS(T, V, I, LANES, SUFFIX, TINY)                                            \
    typedef T V __attribute__((vector_size(sizeof(T) * LANES)));                               \
    typedef I V##_index __attribute__((vector_size(sizeof(T) * LANES)));                       \
                                                                                               \
    /* The least lane of v, and of an index vector: a tree of minima, so the LANES - 1         \
     * comparisons wait on each other log2(LANES) deep, not LANES - 1. */                      \
    static inline T hmin_##SUFFIX(V v) {                                                       \
        for (int half = LANES / 2; half > 0; half /= 2)                                        \
            for (int l = 0; l < half; l++) v[l] = v[l + half] < v[l] ? v[l + half] : v[l];     \
        return v[0];                                                                           \
    }                                                                                          \
    static inline I hmin_index_##SUFFIX(V##_index v) {                                         \
        for (int half = LANES / 2; half > 0; half /= 2)                                        \
            for (int l = 0; l < half; l++) v[l] = v[l + half] < v[l] ? v[l + half] : v[l];     \
        return v[0];                                                                           \
    }                                                                                          \
                                                                                               \
    /* Lowest index of the minimum over the lanes' bests (ties: lowest index). */              \
    static inline int64_t reduce_##SUFFIX(V best, V##_index at, T *out) {                      \
        const T m = hmin_##SUFFIX(best);                                                       \
        const V##_index none = (V##_index){0} + INDEX_MAX(I);                                  \
        const V##_index tied = best == m;                                                      \
        *out = m;                                                                              \
        return (int64_t)hmin_index_##SUFFIX((at & tied) | (none & ~tied));                     \
    }                                                                                          \
                                                                                               \
    /* Lane by lane, a where mask is set, else b. */                                           \
    static inline V select_##SUFFIX(V##_index mask, V a, V b) {                                \
        return (V)(((V##_index)a & mask) | ((V##_index)b & ~mask));                            \
    }                                                                                          \
                                                                                               \
    /* a * b + c lane by lane, each lane as MUL_ADD rounds it (the compiler makes one vector   \
     * instruction of it where the target has one). */                                         \
    static inline __attribute__((always_inline)) V mul_add_##SUFFIX(T a, V b, V c) {           \
        UNROLL for (int l = 0; l < LANES; l++) c[l] = MUL_ADD(T, a, b[l], c[l]);               \
        return c;                                                                              \
    }                                                                                          \
                                                                                               \
    /* Partial distances c_sq[j] - 2 x.c_j of R rows (xs) to G groups of LANES centres from    \
     * column j of CT (d x kp): R x G independent sums, so the FMAs of one row's chain do not  \
     * wait on each other and each load of CT serves R rows. */                                \
    static inline __attribute__((always_inline)) void partials_##SUFFIX(                       \
        const T *const xs[ROWS], int64_t d, const T *restrict CT, const T *restrict c_sq,      \
        int64_t kp, int64_t j, const int G, V acc[ROWS][GROUPS]) {                             \
        UNROLL for (int g = 0; g < G; g++) {                                                   \
            V start;                                                                           \
            memcpy(&start, c_sq + j + g * LANES, sizeof start);                                \
            UNROLL for (int r = 0; r < ROWS; r++) acc[r][g] = start;                           \
        }                                                                                      \
        for (int64_t t = 0; t < d; t++) {                                                      \
            V ct[GROUPS];                                                                      \
            UNROLL for (int g = 0; g < G; g++)                                                 \
                memcpy(&ct[g], CT + t * kp + j + g * LANES, sizeof(V));                        \
            UNROLL for (int r = 0; r < ROWS; r++) {                                            \
                const T x = xs[r][t];                                                          \
                UNROLL for (int g = 0; g < G; g++)                                             \
                    acc[r][g] = mul_add_##SUFFIX(x, ct[g], acc[r][g]);                         \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
                                                                                               \
    /* partials from column j: GROUPS groups where kp leaves room, else one (a constant        \
     * G in each call, so the loops unroll); returns the groups computed. */                   \
    static inline __attribute__((always_inline)) int partials_from_##SUFFIX(                   \
        const T *const xs[ROWS], int64_t d, const T *restrict CT, const T *restrict c_sq,      \
        int64_t kp, int64_t j, V acc[ROWS][GROUPS]) {                                          \
        if (j + GROUPS * LANES <= kp) {                                                        \
            partials_##SUFFIX(xs, d, CT, c_sq, kp, j, GROUPS, acc);                            \
            return GROUPS;                                                                     \
        }                                                                                      \
        partials_##SUFFIX(xs, d, CT, c_sq, kp, j, 1, acc);                                     \
        return 1;                                                                              \
    }                                                                                          \
                                                                                               \
    /* Keep, lane by lane, the smaller of best and p (the earlier column on ties). */          \
    static inline void keep_min_##SUFFIX(V p, V##_index idx, V *best, V##_index *at) {         \
        V##_index lower = p < *best;                                                           \
        *best = select_##SUFFIX(lower, p, *best);                                              \
        *at = (idx & lower) | (*at & ~lower);                                                  \
    }                                                                                          \
                                                                                               \
    /* As keep_min, and next = min(next, max(p, best)): the lane's second smallest so far. */  \
    static inline void keep_two_##SUFFIX(V p, V##_index idx, V *best, V##_index *at,           \
                                         V *next) {                                            \
        const V bigger = select_##SUFFIX(p < *best, *best, p);                                 \
        *next = select_##SUFFIX(bigger < *next, bigger, *next);                                \
        keep_min_##SUFFIX(p, idx, best, at);                                                   \
    }                                                                                          \
                                                                                               \
    static inline void start_##SUFFIX(V *best, V##_index *at) {                                \
        *best = (V){0} + (T)INFINITY;                                                          \
        *at = (V##_index){0};                                                                  \
    }                                                                                          \
                                                                                               \
    /* The ROWS row pointers of the group from row i of X, rows of them real (a block's last   \
     * group repeats its last row in the rest: its results are not written). */                \
    static inline void row_group_##SUFFIX(const T *X, int64_t d, int64_t i, int rows,          \
                                          const T *xs[ROWS]) {                                 \
        UNROLL for (int r = 0; r < ROWS; r++) xs[r] = X + (i + (r < rows ? r : rows - 1)) * d; \
    }                                                                                          \
                                                                                               \
    static inline V##_index iota_##SUFFIX(void) {                                              \
        V##_index idx = {0};                                                                   \
        UNROLL for (int l = 0; l < LANES; l++) idx[l] = (I)l;                                  \
        return idx;                                                                            \
    }                                                                                          \
                                                                                               \
    /* The second smallest over the lanes once the nearest (lab) is known: each lane's next    \
     * smallest, and its smallest where that is not lab's. */                                  \
    static inline T second_of_##SUFFIX(V best, V##_index at, V next, int64_t lab) {            \
        const V##_index other = at != (I)lab;                                                  \
        const V rest = (V)(((V##_index)best & other) | ((V##_index)next & ~other));            \
        const T s = hmin_##SUFFIX(next), r = hmin_##SUFFIX(rest);                              \
        return r < s ? r : s;                                                                  \
    }                                                                                          \
                                                                                               \
    /* Add a row of weight wi to cluster `to`'s float64 sums and, from >= 0, take it from      \
     * cluster `from`'s (a row that moved). */                                                 \
    static inline void add_row_##SUFFIX(double *restrict num, double *restrict den,            \
                                        const T *restrict x, int64_t d, double wi, int64_t to, \
                                        int64_t from) {                                        \
        double *a = num + to * d;                                                              \
        for (int64_t t = 0; t < d; t++) a[t] += wi * (double)x[t];                             \
        den[to] += wi;                                                                         \
        if (from < 0) return;                                                                  \
        double *b = num + from * d;                                                            \
        for (int64_t t = 0; t < d; t++) b[t] -= wi * (double)x[t];                             \
        den[from] -= wi;                                                                       \
    }                                                                                          \
                                                                                               \
    /* Nearest (lab, its partial distance in out) and, with second, the next smallest          \
     * partial distance (a tie of the nearest counts: two centres at the same distance are     \
     * both "nearest") of each of the ROWS rows xs among the centres (CT = -2 C^T, d x kp;     \
     * padding: c_sq = +inf). */                                                               \
    static inline __attribute__((always_inline)) void nearest_direct_##SUFFIX(                 \
        const T *const xs[ROWS], int64_t d, const T *restrict CT, const T *restrict c_sq,      \
        int64_t kp, int64_t lab[ROWS], T out[ROWS], T *second) {                               \
        V best[ROWS], next[ROWS], acc[ROWS][GROUPS];                                           \
        V##_index at[ROWS], idx = iota_##SUFFIX();                                             \
        UNROLL for (int r = 0; r < ROWS; r++) {                                                \
            start_##SUFFIX(&best[r], &at[r]);                                                  \
            next[r] = best[r];                                                                 \
        }                                                                                      \
        for (int64_t j = 0; j < kp;) {                                                         \
            const int G = partials_from_##SUFFIX(xs, d, CT, c_sq, kp, j, acc);                 \
            UNROLL for (int g = 0; g < G; g++) {                                               \
                UNROLL for (int r = 0; r < ROWS; r++) {                                        \
                    if (second)                                                                \
                        keep_two_##SUFFIX(acc[r][g], idx, &best[r], &at[r], &next[r]);         \
                    else                                                                       \
                        keep_min_##SUFFIX(acc[r][g], idx, &best[r], &at[r]);                   \
                }                                                                              \
                idx += (I)LANES;                                                               \
            }                                                                                  \
            j += G * LANES;                                                                    \
        }                                                                                      \
        UNROLL for (int r = 0; r < ROWS; r++) {                                                \
            lab[r] = reduce_##SUFFIX(best[r], at[r], &out[r]);                                 \
            if (second) second[r] = second_of_##SUFFIX(best[r], at[r], next[r], lab[r]);       \
        }                                                                                      \
    }                                                                                          \
                                                                                               \
    /* Nearest in one row of partial distances (kp columns, padding +inf) and, with second,    \
     * the next smallest, as nearest_direct's. */                                              \
    static inline __attribute__((always_inline)) int64_t nearest_row_##SUFFIX(                 \
        const T *restrict row, int64_t kp, T *out, T *second) {                                \
        V best, next, p;                                                                       \
        V##_index at, idx = iota_##SUFFIX();                                                   \
        start_##SUFFIX(&best, &at);                                                            \
        next = best;                                                                           \
        for (int64_t j = 0; j < kp; j += LANES) {                                              \
            memcpy(&p, row + j, sizeof p);                                                     \
            if (second)                                                                        \
                keep_two_##SUFFIX(p, idx, &best, &at, &next);                                  \
            else                                                                               \
                keep_min_##SUFFIX(p, idx, &best, &at);                                         \
            idx += (I)LANES;                                                                   \
        }                                                                                      \
        const int64_t lab = reduce_##SUFFIX(best, at, out);                                    \
        if (second) *second = second_of_##SUFFIX(best, at, next, lab);                         \
        return lab;                                                                            \
    }                                                                                          \
                                                                                               \
    /* Row i's label lab (partial distance p) recorded: min_dist, labels and, as mode says,    \
     * the sums; its w_i min_dist_i added to *total; whether its label changed. */             \
    static inline int finish_row_##SUFFIX(const T *restrict X, int64_t d,                      \
                                          const T *restrict x_sq, const T *restrict w,         \
                                          int64_t *restrict labels, T *restrict min_dist,      \
                                          double *restrict num, double *restrict den,          \
                                          int mode, int64_t i, int64_t lab, T p,               \
                                          double *total) {                                     \
        const int64_t old = labels[i];                                                         \
        T dist = p + x_sq[i];                                                                  \
        dist = dist < (T)0 ? (T)0 : dist;                                                      \
        min_dist[i] = dist;                                                                    \
        const double wi = w ? (double)w[i] : 1.0;                                              \
        *total += wi * (double)dist;                                                           \
        labels[i] = lab;                                                                       \
        if (mode == 0)                                                                         \
            add_row_##SUFFIX(num, den, X + i * d, d, wi, lab, -1);                             \
        else if (mode == 1 && lab != old)                                                      \
            add_row_##SUFFIX(num, den, X + i * d, d, wi, lab, old);                            \
        return lab != old;                                                                     \
    }                                                                                          \
                                                                                               \
    /* The block: X (m x d), x_sq (m), centres as CT/c_sq (direct) or D (m x ldd, ldd and      \
     * kp multiples of LANES); w (m) or NULL; labels (m, in: last pass's, out: new);           \
     * min_dist (m, out); second (m, out, or NULL): the second-nearest squared distance;       \
     * num (k x d), den (k): float64 sums, added to. Returns the rows                          \
     * whose label changed; *inertia gets sum_i w_i min_dist_i. Direct distances go ROWS       \
     * rows at a time (the last group padded with copies of the block's last row). */          \
    int64_t lloyd_block_##SUFFIX(const T *restrict X, int64_t m, int64_t d,                    \
                                 const T *restrict x_sq, const T *restrict CT,                 \
                                 const T *restrict c_sq, int64_t kp, const T *restrict D,      \
                                 int64_t ldd, const T *restrict w, int64_t *restrict labels,   \
                                 T *restrict min_dist, T *restrict second,                     \
                                 double *restrict num, double *restrict den, int mode,         \
                                 double *inertia) {                                            \
        int64_t moved = 0;                                                                     \
        double total = 0.0;                                                                    \
        for (int64_t i = 0; i < m; i += ROWS) {                                                \
            int64_t lab[ROWS];                                                                 \
            T p[ROWS], p2[ROWS];                                                               \
            T *const next = second ? p2 : NULL;                                                \
            const int rows = m - i < ROWS ? (int)(m - i) : ROWS;                               \
            if (D && next) {                                                                   \
                for (int r = 0; r < rows; r++)                                                 \
                    lab[r] = nearest_row_##SUFFIX(D + (i + r) * ldd, kp, &p[r], &next[r]);     \
            } else if (D) { /* apart, so that this loop has no test for second */              \
                for (int r = 0; r < rows; r++)                                                 \
                    lab[r] = nearest_row_##SUFFIX(D + (i + r) * ldd, kp, &p[r], NULL);         \
            } else {                                                                           \
                const T *xs[ROWS];                                                             \
                row_group_##SUFFIX(X, d, i, rows, xs);                                         \
                nearest_direct_##SUFFIX(xs, d, CT, c_sq, kp, lab, p, next);                    \
            }                                                                                  \
            for (int r = 0; r < rows; r++) {                                                   \
                moved += finish_row_##SUFFIX(X, d, x_sq, w, labels, min_dist, num, den, mode,  \
                                             i + r, lab[r], p[r], &total);                     \
                if (!next) continue;                                                           \
                const T dist = next[r] + x_sq[i + r];                                          \
                second[i + r] = dist < (T)0 ? (T)0 : dist;                                     \
            }                                                                                  \
        }                                                                                      \
        *inertia = total;                                                                      \
        return moved;                                                                          \
    }                                                                                          \
                                                                                               \
    /* The M-step of a Lloyd pass from its float64 sums num (k x d) and den (k), as the        \
     * workspace makes it: a cluster whose weight is at most den_floor is empty, the others'   \
     * centres C_new = (T)num / (T)den. Returns the empty clusters (their rows of C_new are    \
     * not written: the caller re-seeds them); *shift gets sum ||C_new - C||^2 over the        \
     * others, in float64. *inertia is the pass's, from the sums: sum_sq (sum_i w_i            \
     * ||x_i||^2) - 2 sum_j c_j . num_j + sum_j den_j ||c_j||^2, not from the rows'            \
     * distances, which carry the T rounding of the expansion (about eps ||x||^2 a row:        \
     * more than a tight fit's inertia can bear). */                                           \
    int64_t lloyd_update_##SUFFIX(const double *restrict num, const double *restrict den,      \
                                  const T *restrict C, int64_t k, int64_t d, double sum_sq,    \
                                  double den_floor, T *restrict C_new, double *inertia,        \
                                  double *shift) {                                             \
        double cross = 0.0, spread = 0.0; /* the inertia from the sums (see the comment) */    \
        for (int64_t j = 0; j < k; j++) {                                                      \
            double c_sq_j = 0.0;                                                               \
            for (int64_t t = 0; t < d; t++) {                                                  \
                const double c = (double)C[j * d + t];                                         \
                c_sq_j += c * c;                                                               \
                cross += c * num[j * d + t];                                                   \
            }                                                                                  \
            spread += den[j] * c_sq_j;                                                         \
        }                                                                                      \
        const double from_sums = sum_sq - 2.0 * cross + spread;                                \
        *inertia = from_sums > 0.0 ? from_sums : 0.0;                                          \
        int64_t empty = 0;                                                                     \
        double moved = 0.0;                                                                    \
        for (int64_t j = 0; j < k; j++) {                                                      \
            T weight = den[j] > den_floor ? (T)den[j] : (T)0;                                  \
            if (weight <= (T)0) {                                                              \
                empty++;                                                                       \
                continue;                                                                      \
            }                                                                                  \
            weight = weight < TINY ? TINY : weight;                                            \
            for (int64_t t = 0; t < d; t++) {                                                  \
                const T c = (T)num[j * d + t] / weight;                                        \
                const double step = (double)c - (double)C[j * d + t];                          \
                C_new[j * d + t] = c;                                                          \
                moved += step * step;                                                          \
            }                                                                                  \
        }                                                                                      \
        *shift = moved;                                                                        \
        return empty;                                                                          \
    }                                                                                          \
                                                                                               \
    /* Farthest-first picks among a pool of m points P (m x d, rows contiguous): each pick     \
     * the point of largest value (ties: the lowest index), then every value lowered to the    \
     * point's squared distance to it (by direct differences) where that is smaller. values    \
     * (m): the points' squared distances to the centres, updated in place; index (m): the     \
     * points' indices in the data. Makes at most n_new picks, into taken (pool positions),    \
     * and stops before a pick whose value is not above outside (the best value outside the    \
     * pool); returns the picks made. */                                                       \
    int64_t farthest_picks_##SUFFIX(const T *restrict P, int64_t m, int64_t d,                 \
                                    T *restrict values, const int64_t *restrict index,         \
                                    T outside, int64_t n_new, int64_t *restrict taken) {       \
        for (int64_t pick = 0; pick < n_new && m > 0; pick++) {                                \
            int64_t j = 0;                                                                     \
            for (int64_t i = 1; i < m; i++) {                                                  \
                const int tie_lower = values[i] == values[j] && index[i] < index[j];           \
                if (values[i] > values[j] || tie_lower) j = i;                                 \
            }                                                                                  \
            if (!(values[j] > outside)) return pick;                                           \
            taken[pick] = j;                                                                   \
            const T *p = P + j * d;                                                            \
            for (int64_t i = 0; i < m; i++) {                                                  \
                const T *x = P + i * d;                                                        \
                T s = 0;                                                                       \
                for (int64_t t = 0; t < d; t++) {                                              \
                    const T diff = x[t] - p[t];                                                \
                    s += diff * diff;                                                          \
                }                                                                              \
                values[i] = s < values[i] ? s : values[i];                                     \
            }                                                                                  \
        }                                                                                      \
        return m > 0 ? n_new : 0;                                                              \
    }                                                                                          \
                                                                                               \
    /* sum_i w_i ||x_i||^2 over the m rows of X (w NULL: all 1), in float64: lloyd_update's    \
     * sum_sq, which must carry less rounding than T's (see there). */                         \
    double weighted_sum_sq_##SUFFIX(const T *restrict X, int64_t m, int64_t d,                 \
                                    const T *restrict w) {                                     \
        double total = 0.0;                                                                    \
        for (int64_t i = 0; i < m; i++) {                                                      \
            const T *x = X + i * d;                                                            \
            double s = 0.0;                                                                    \
            for (int64_t t = 0; t < d; t++) s += (double)x[t] * (double)x[t];                  \
            total += w ? (double)w[i] * s : s;                                                 \
        }                                                                                      \
        return total;                                                                          \
    }                                                                                          \
                                                                                               \
    /* The k centres C (k x d) laid out for a pass of kp >= k columns: c_sq their squared      \
     * norms (given: the caller's own sums, bit for bit), +inf past k; and, where CT is not    \
     * NULL, CT = -2 C^T (d x kp, exactly), zero past k. One call for the half dozen torch     \
     * ops of a padded copy and a strided transpose. */                                        \
    void centre_layout_##SUFFIX(const T *restrict C, const T *restrict norms, int64_t k,       \
                                int64_t d, int64_t kp, T *restrict c_sq, T *restrict CT) {     \
        for (int64_t j = 0; j < kp; j++) c_sq[j] = j < k ? norms[j] : (T)INFINITY;             \
        if (!CT) return;                                                                       \
        for (int64_t t = 0; t < d; t++) {                                                      \
            T *restrict row = CT + t * kp;                                                     \
            for (int64_t j = 0; j < k; j++) row[j] = (T)-2 * C[j * d + t];                     \
            for (int64_t j = k; j < kp; j++) row[j] = 0;                                       \
        }                                                                                      \
    }                                                                                          \
    /* v rounded to T upwards and downwards (a bound that stays a bound). */                   \
    static inline T round_up_##SUFFIX(double v) {                                              \
        const T r = (T)v;                                                                      \
        return (double)r < v ? NEXT_TOWARD(T, r, INFINITY) : r;                                \
    }                                                                                          \
    static inline T round_down_##SUFFIX(double v) {                                            \
        const T r = (T)v;                                                                      \
        return (double)r > v ? NEXT_TOWARD(T, r, -INFINITY) : r;                               \
    }                                                                                          \
                                                                                               \
    /* How the k centres C (k x d) moved from old: own[j] = ||c_j - old_j|| and others[j],     \
     * the largest move of any other centre (0 alone), rounded up; with gaps, half_gap[j],     \
     * half the distance from c_j to its nearest other (+inf alone) less margin, rounded       \
     * down (else the caller fills it). In float64 from the differences, k^2 d               \
     * multiply-adds for the gaps: for a few centres, a dozen torch ops in one call. */        \
    void centre_drift_##SUFFIX(const T *restrict C, const T *restrict old, int64_t k,          \
                               int64_t d, int gaps, T margin, T *restrict own,                 \
                               T *restrict others, T *restrict half_gap) {                     \
        int64_t top = 0;                                                                       \
        for (int64_t j = 0; j < k; j++) {                                                      \
            double s = 0.0;                                                                    \
            for (int64_t t = 0; t < d; t++) {                                                  \
                const double e = (double)C[j * d + t] - (double)old[j * d + t];                \
                s += e * e;                                                                    \
            }                                                                                  \
            own[j] = round_up_##SUFFIX(sqrt(s));                                               \
            if (own[j] > own[top]) top = j;                                                    \
        }                                                                                      \
        T next = 0;                                                                            \
        for (int64_t j = 0; j < k; j++)                                                        \
            if (j != top && own[j] > next) next = own[j];                                      \
        for (int64_t j = 0; j < k; j++) others[j] = j == top ? next : own[top];                \
        if (!gaps) return;                                                                     \
        for (int64_t j = 0; j < k; j++) {                                                      \
            double least = INFINITY;                                                           \
            for (int64_t i = 0; i < k; i++) {                                                  \
                if (i == j) continue;                                                          \
                double s = 0.0;                                                                \
                for (int64_t t = 0; t < d; t++) {                                              \
                    const double e = (double)C[i * d + t] - (double)C[j * d + t];              \
                    s += e * e;                                                                \
                }                                                                              \
                least = s < least ? s : least;                                                 \
            }                                                                                  \
            half_gap[j] = round_down_##SUFFIX(0.5 * sqrt(least) - (double)margin);             \
        }                                                                                      \
    }                                                                                          \
    /* Row i's lower bound moved by the centres' drift: every other centre moved at most       \
     * others[a] (a: its old centre); with neighbour lists, those in a's list at most near[a]  \
     * and those left out are at least tail[a] - u from the row (u: a bound on its distance    \
     * to c_a), which holds however far they moved. */                                         \
    static inline T moved_lower_##SUFFIX(T lower, int64_t a, T u, const T *restrict others,    \
                                         const T *restrict near, const T *restrict tail,       \
                                         int64_t width) {                                      \
        const T far = lower - others[a];                                                       \
        if (!near) return far;                                                                 \
        const T listed = lower - near[a], left_out = tail[a * width + width - 1] - u;          \
        const T outside = far > left_out ? far : left_out;                                     \
        return listed < outside ? listed : outside;                                            \
    }                                                                                          \
                                                                                               \
    /* Row i's bounds set to u (upper) and, from before (its lower bound before the move),     \
     * the moved lower (moved_lower: a its old centre); whether they no longer show its        \
     * label. near, tail, width: see moved_lower (near NULL: no lists). */                     \
    static inline int fails_##SUFFIX(T u, T before, int64_t a, const T *restrict others,       \
                                     const T *restrict near, const T *restrict tail,           \
                                     int64_t width, const T *restrict half_gap,                \
                                     T *restrict upper, T *restrict lower) {                   \
        const T l = moved_lower_##SUFFIX(before, a, u, others, near, tail, width);             \
        const T limit = l > half_gap[a] ? l : half_gap[a];                                     \
        *upper = u;                                                                            \
        *lower = l;                                                                            \
        return u > limit;                                                                      \
    }                                                                                          \
                                                                                               \
    /* The rows of [i0, i1) whose bounds, moved by the centres' drift (lloyd_bounded), no      \
     * longer show their label, into fail (their lower bounds before the move into was), with  \
     * no branch: a row's test is a few loads, and a branch per row mispredicts as often as    \
     * half the rows fail. Every row's bounds are moved. Returns how many failed. */           \
    static inline int64_t failing_##SUFFIX(const int64_t *restrict labels, int64_t i0,         \
                                           int64_t i1, T *restrict upper, T *restrict lower,   \
                                           const T *restrict own, const T *restrict others,    \
                                           const T *restrict near, const T *restrict tail,     \
                                           int64_t width, const T *restrict half_gap,          \
                                           int64_t *restrict fail, T *restrict was) {          \
        int64_t n = 0;                                                                         \
        for (int64_t i = i0; i < i1; i++) {                                                    \
            const int64_t a = labels[i];                                                       \
            const T before = lower[i];                                                         \
            fail[n] = i;                                                                       \
            was[n] = before;                                                                   \
            n += fails_##SUFFIX(upper[i] + own[a], before, a, others, near, tail, width,       \
                                half_gap, upper + i, lower + i);                               \
        }                                                                                      \
        return n;                                                                              \
    }                                                                                          \
                                                                                               \
    /* Of the rows fail[0..failed) whose moved bounds failed (failing), those that still       \
     * fail once their upper bound is tightened to their exact distance to their centre,       \
     * kept in fail in order; returns how many. Their bounds are updated (the lower moved      \
     * again from was). No branch per row, as in failing: the rows' distances and roots        \
     * overlap rather than wait on each other. */                                              \
    static inline int64_t still_failing_##SUFFIX(const T *restrict X, int64_t d,               \
                                                 const T *restrict CT, int64_t kp,             \
                                                 const int64_t *restrict labels,               \
                                                 T *restrict upper, T *restrict lower,         \
                                                 const T *restrict others,                     \
                                                 const T *restrict near,                       \
                                                 const T *restrict tail, int64_t width,        \
                                                 const T *restrict half_gap, T margin,         \
                                                 int64_t *restrict fail,                       \
                                                 const T *restrict was, int64_t failed) {      \
        int64_t n = 0;                                                                         \
        for (int64_t f = 0; f < failed; f++) {                                                 \
            const int64_t i = fail[f], a = labels[i];                                          \
            const T *restrict xi = X + i * d;                                                  \
            T s = 0;                                                                           \
            for (int64_t t = 0; t < d; t++) {                                                  \
                const T diff = xi[t] + (T)0.5 * CT[t * kp + a];                                \
                s += diff * diff;                                                              \
            }                                                                                  \
            fail[n] = i;                                                                       \
            n += fails_##SUFFIX(ROOT(T, s) + margin, was[f], a, others, near, tail, width,     \
                                half_gap, upper + i, lower + i);                               \
        }                                                                                      \
        return n;                                                                              \
    }                                                                                          \
    /* What a bounded pass's helpers share: the block's rows, the centres, the per-row         \
     * state they write (labels, min_dist, the bounds) and the sums. */                        \
    struct bounded_##SUFFIX {                                                                  \
        const T *X, *x_sq, *CT, *c_sq, *w;                                                     \
        int64_t d, kp;                                                                         \
        int64_t *labels;                                                                       \
        T *min_dist, *upper, *lower;                                                           \
        T margin;                                                                              \
        double *num, *den;                                                                     \
    };                                                                                         \
                                                                                               \
    /* Row i labelled lab (partial distance p), its distance to any other at least `other`:    \
     * min_dist, the bounds, the label and the sums (mode as finish_row's). */                 \
    static inline void bound_row_##SUFFIX(const struct bounded_##SUFFIX *b, int mode,          \
                                          int64_t i, int64_t lab, T p, T other) {              \
        double unused = 0.0; /* the bounded pass takes its inertia elsewhere */                \
        finish_row_##SUFFIX(b->X, b->d, b->x_sq, b->w, b->labels, b->min_dist, b->num, b->den, \
                            mode, i, lab, p, &unused);                                         \
        b->upper[i] = ROOT(T, b->min_dist[i]) + 2 * b->margin;                                 \
        b->lower[i] = other - b->margin;                                                       \
    }                                                                                          \
                                                                                               \
    /* The nearest centre (lab, its partial distance p) and the second-nearest partial         \
     * distance p2 of up to ROWS rows (indices at), against every centre. */                   \
    static inline void nearest_of_##SUFFIX(const struct bounded_##SUFFIX *b,                   \
                                           const int64_t *at, int rows, int64_t lab[ROWS],     \
                                           T p[ROWS], T p2[ROWS]) {                            \
        const T *xs[ROWS];                                                                     \
        UNROLL for (int r = 0; r < ROWS; r++)                                                  \
            xs[r] = b->X + at[r < rows ? r : rows - 1] * b->d;                                 \
        nearest_direct_##SUFFIX(xs, b->d, b->CT, b->c_sq, b->kp, lab, p, p2);                  \
    }                                                                                          \
                                                                                               \
    /* Label the rows (up to ROWS of them, indices at) whose bounds failed against every       \
     * centre: min_dist, the bounds from the nearest and second-nearest, the labels and the    \
     * sums (mode as finish_row's). */                                                         \
    static inline void relabel_##SUFFIX(const struct bounded_##SUFFIX *b, int mode,            \
                                        const int64_t *at, int rows) {                         \
        int64_t lab[ROWS];                                                                     \
        T p[ROWS], p2[ROWS];                                                                   \
        nearest_of_##SUFFIX(b, at, rows, lab, p, p2);                                          \
        for (int r = 0; r < rows; r++) {                                                       \
            const int64_t i = at[r];                                                           \
            T dist2 = p2[r] + b->x_sq[i];                                                      \
            dist2 = dist2 < (T)0 ? (T)0 : dist2;                                               \
            bound_row_##SUFFIX(b, mode, i, lab[r], p[r], ROOT(T, dist2));                      \
        }                                                                                      \
    }                                                                                          \
                                                                                               \
    /* Whether any lane of a mask is set. */                                                   \
    static inline int any_##SUFFIX(V##_index mask) {                                           \
        uint64_t words[sizeof mask / sizeof(uint64_t)], any = 0;                               \
        memcpy(words, &mask, sizeof mask);                                                     \
        for (size_t w = 0; w < sizeof words / sizeof words[0]; w++) any |= words[w];           \
        return any != 0;                                                                       \
    }                                                                                          \
                                                                                               \
    /* Four times the squared distances from centre a (its column of CT broadcast in ca,       \
     * d <= 32 of them) to the LANES centres from column j of CT (= -2 C^T: the differences    \
     * of its columns are -2 (c_j - c_a), exactly). */                                         \
    static inline V gaps4_from_##SUFFIX(const T *restrict CT, int64_t kp, int64_t d,           \
                                        const V *restrict ca, int64_t j) {                     \
        V s = {0};                                                                             \
        for (int64_t t = 0; t < d; t++) {                                                      \
            V ct;                                                                              \
            memcpy(&ct, CT + t * kp + j, sizeof ct);                                           \
            const V diff = ct - ca[t];                                                         \
            s += diff * diff;                                                                  \
        }                                                                                      \
        return s;                                                                              \
    }                                                                                          \
                                                                                               \
    /* Inserts centre c at v (four times its squared gap) into a list (o, g) that holds        \
     * *held of at most width, nearest first (an equal gap goes after: ties keep the lower     \
     * index first when the centres come in order). */                                         \
    static inline void keep_nearest_##SUFFIX(int32_t *restrict o, T *restrict g,               \
                                             int64_t *held, int64_t width, int64_t c, T v) {   \
        int64_t r = *held < width ? (*held)++ : width - 1;                                     \
        for (; r > 0 && g[r - 1] > v; r--) {                                                   \
            g[r] = g[r - 1];                                                                   \
            o[r] = o[r - 1];                                                                   \
        }                                                                                      \
        g[r] = v;                                                                              \
        o[r] = (int32_t)c;                                                                     \
    }                                                                                          \
                                                                                               \
    /* Centre a's list (o, g: four times the squared gaps) of its `width` nearest others among \
     * those within start (likewise) of it, by insertion, GROUPS x LANES columns at a time     \
     * checked against the list's last at once; returns how many it holds. d <= 32. */         \
    static inline int64_t fill_list_##SUFFIX(const T *restrict CT, int64_t kp, int64_t k,      \
                                             int64_t d, int64_t width, int64_t a, T start,     \
                                             int32_t *restrict o, T *restrict g) {             \
        V ca[32];                                                                              \
        for (int64_t t = 0; t < d; t++) ca[t] = (V){0} + CT[t * kp + a];                       \
        int64_t held = 0;                                                                      \
        T limit = start; /* a gap kept must be at most this (then below, once full) */         \
        for (int64_t j = 0; j < kp; j += GROUPS * LANES) {                                     \
            V s[GROUPS];                                                                       \
            V##_index near = {0};                                                              \
            const int G = j + GROUPS * LANES <= kp ? GROUPS : 1;                               \
            UNROLL for (int q = 0; q < G; q++) {                                               \
                s[q] = gaps4_from_##SUFFIX(CT, kp, d, ca, j + q * LANES);                      \
                near |= s[q] <= limit;                                                         \
            }                                                                                  \
            if (!any_##SUFFIX(near)) continue;                                                 \
            for (int64_t c = j; c < j + G * LANES; c++) {                                      \
                const T v = s[(c - j) / LANES][(c - j) % LANES];                               \
                if (c >= k || c == a || !(held < width ? v <= limit : v < limit)) continue;    \
                keep_nearest_##SUFFIX(o, g, &held, width, c, v);                               \
                if (held == width) limit = g[width - 1];                                       \
            }                                                                                  \
        }                                                                                      \
        return held;                                                                           \
    }                                                                                          \
                                                                                               \
    /* Centre a's list as a bounded pass reads it, from o and g (held entries, four times the  \
     * squared gaps): the gaps, each at most tail (a bound on the gap of every centre not      \
     * listed), -1 and +inf past held; and its slice of nb (c_sq, then the columns of CT). */  \
    static inline void store_list_##SUFFIX(const T *restrict CT, const T *restrict c_sq,       \
                                           int64_t kp, int64_t d, int64_t width, int64_t held, \
                                           T tail, int32_t *restrict o, T *restrict g,         \
                                           T *restrict list) {                                 \
        for (int64_t r = 0; r < width; r++) {                                                  \
            const int real = r < held;                                                         \
            const T gap = real ? (T)0.5 * ROOT(T, g[r]) : (T)INFINITY;                         \
            g[r] = gap < tail ? gap : tail;                                                    \
            o[r] = real ? o[r] : -1;                                                           \
            list[r] = real ? c_sq[o[r]] : (T)INFINITY;                                         \
            for (int64_t t = 0; t < d; t++)                                                    \
                list[(1 + t) * width + r] = real ? CT[t * kp + o[r]] : (T)0;                   \
        }                                                                                      \
    }                                                                                          \
                                                                                               \
    /* Centre a's exact list, its search bounded by start (four times a squared gap within     \
     * which at least width others lie, or +inf); see centre_neighbours. */                    \
    static inline void exact_list_##SUFFIX(const T *restrict CT, const T *restrict c_sq,       \
                                           int64_t kp, int64_t k, int64_t d, int64_t width,    \
                                           int64_t a, T start, int32_t *restrict o,            \
                                           T *restrict g, T *restrict list) {                  \
        int64_t held = fill_list_##SUFFIX(CT, kp, k, d, width, a, start, o, g);                \
        if (held < width && start < (T)INFINITY) /* rounding left a hinted centre out */       \
            held = fill_list_##SUFFIX(CT, kp, k, d, width, a, (T)INFINITY, o, g);              \
        store_list_##SUFFIX(CT, c_sq, kp, d, width, held, (T)INFINITY, o, g, list);            \
    }                                                                                          \
                                                                                               \
    /* The `width` nearest other centres of each centre a in [from, to), nearest first (ties:  \
     * lower index first), by direct differences (no cancellation: the gaps between close      \
     * centres are small beside their norms): order (k x width, -1 where fewer than width      \
     * others exist), gap (k x width, the distances, +inf past the others) and, for the        \
     * rows' scans, nb (k x (d + 1) x width): each list's c_sq, then its columns of CT, so     \
     * that LANES partial distances of a list are d + 1 vector loads. width: a multiple of     \
     * LANES. */                                                                               \
    void centre_neighbours_##SUFFIX(const T *restrict CT, const T *restrict c_sq, int64_t kp,  \
                                    int64_t k, int64_t d, int64_t width, int64_t from,         \
                                    int64_t to, int32_t *restrict order, T *restrict gap,      \
                                    T *restrict nb) {                                          \
        for (int64_t a = from; a < to; a++)                                                    \
            exact_list_##SUFFIX(CT, c_sq, kp, k, d, width, a, (T)INFINITY, order + a * width,  \
                                gap + a * width, nb + a * (d + 1) * width);                    \
    }                                                                                          \
                                                                                               \
    /* Lists as centre_neighbours makes them, kept up from the last ones (old_order,           \
     * old_gap: made, or kept up, at centres that have since moved by own[a] each) where the   \
     * triangle inequality allows. A centre j not in a's old list was at least old_gap[a][     \
     * width - 1] from c_a, so it is now at least tail = that - own[a] - own[j]; own[j] is at  \
     * most rest but for the n_movers centres `movers` (mover[j] != 0), which moved farther.   \
     * So a's new list is the nearest width of its old list and the movers, their gaps exact   \
     * and each at most tail: what the rows' scans need (every centre past a list position,    \
     * listed or not, at least its gap from c_a), and the next upkeep's tail. Where tail       \
     * falls below the gap at list position keep, a scan would stop at the tail early, and     \
     * the list is made exact again (bounded by its candidates, as a hint). Returns the lists  \
     * made exact. k > width. */                                                               \
    int64_t refresh_neighbours_##SUFFIX(const T *restrict CT, const T *restrict c_sq,          \
                                        int64_t kp, int64_t k, int64_t d, int64_t width,       \
                                        int64_t from, int64_t to,                              \
                                        const int32_t *restrict old_order,                     \
                                        const T *restrict old_gap, const T *restrict own,      \
                                        T rest, const uint8_t *restrict mover,                 \
                                        const int32_t *restrict movers, int64_t n_movers,      \
                                        int64_t keep, int32_t *restrict order,                 \
                                        T *restrict gap, T *restrict nb) {                     \
        int64_t exact = 0;                                                                     \
        for (int64_t a = from; a < to; a++) {                                                  \
            int32_t *o = order + a * width;                                                    \
            T *g = gap + a * width, *list = nb + a * (d + 1) * width;                          \
            const int32_t *last = old_order + a * width;                                       \
            const T was = old_gap[a * width + width - 1];                                      \
            /* less the rounding of the old gap and of the moves, with room to spare */        \
            const T tail = was - own[a] - rest - 8 * EPS_OF(T) * (was + own[a] + rest);        \
            int64_t held = 0;                                                                  \
            for (int64_t r = 0; r < width + n_movers; r++) {                                   \
                const int64_t j = r < width ? last[r] : movers[r - width];                     \
                if (j < 0 || j == a || (r < width && mover[j])) continue;                      \
                T v = 0;                                                                       \
                for (int64_t t = 0; t < d; t++) {                                              \
                    const T diff = CT[t * kp + j] - CT[t * kp + a];                            \
                    v += diff * diff;                                                          \
                }                                                                              \
                if (held < width || v < g[width - 1])                                          \
                    keep_nearest_##SUFFIX(o, g, &held, width, j, v);                           \
            }                                                                                  \
            const T kept = held == width ? (T)0.5 * ROOT(T, g[keep]) : (T)INFINITY;            \
            if (tail >= kept && tail == tail) {                                                \
                store_list_##SUFFIX(CT, c_sq, kp, d, width, held, tail, o, g, list);           \
                continue;                                                                      \
            }                                                                                  \
            exact++;                                                                           \
            const T start = held == width ? g[width - 1] : (T)INFINITY;                        \
            exact_list_##SUFFIX(CT, c_sq, kp, k, d, width, a, start, o, g, list);              \
        }                                                                                      \
        return exact;                                                                          \
    }                                                                                          \
                                                                                               \
    /* Row x's partial distance to centre a, as partials computes it, bit for bit. */          \
    static inline T partial_to_##SUFFIX(const T *restrict x, int64_t d,                        \
                                        const T *restrict CT, const T *restrict c_sq,          \
                                        int64_t kp, int64_t a) {                               \
        T s = c_sq[a];                                                                         \
        for (int64_t t = 0; t < d; t++) s = MUL_ADD(T, x[t], CT[t * kp + a], s);               \
        return s;                                                                              \
    }                                                                                          \
                                                                                               \
    /* Row x's partial distances to the LANES centres of a neighbour list (its slice of        \
     * centre_neighbours' nb, width entries) from position r0: a full scan's, bit for bit. */  \
    static inline V list_partials_##SUFFIX(const T *restrict x, int64_t d,                     \
                                           const T *restrict list, int64_t width,              \
                                           int64_t r0) {                                       \
        V s;                                                                                   \
        memcpy(&s, list + r0, sizeof s);                                                       \
        for (int64_t t = 0; t < d; t++) {                                                      \
            V ct;                                                                              \
            memcpy(&ct, list + (1 + t) * width + r0, sizeof ct);                               \
            s = mul_add_##SUFFIX(x[t], ct, s);                                                 \
        }                                                                                      \
        return s;                                                                              \
    }                                                                                          \
                                                                                               \
    /* Neighbour lists a pass reads rows' candidates from (centre_neighbours' nb, order,       \
     * gap, width) and the rounding error E of a computed squared distance                     \
     * (rbfkm_engine/bounds.py, squared_rounding_error). */                                    \
    typedef struct {                                                                           \
        const T *nb, *gap;                                                                     \
        const int32_t *order;                                                                  \
        int64_t width;                                                                         \
        T error;                                                                               \
    } RowLists_##SUFFIX;                                                                       \
                                                                                               \
    /* A bound from above on the distance to a centre whose computed squared distance is       \
     * dist (error E in it), and a list's gap g lowered to a bound from below on the true      \
     * one (the rounding of its d differences): with them a centre at gap g from c_a is at     \
     * least gap_below(g) - distance_above(D_a) from a row. */                                 \
    static inline T distance_above_##SUFFIX(T dist, T error) {                                 \
        return ROOT(T, (dist < (T)0 ? (T)0 : dist) + error) * (1 + 16 * EPS_OF(T));            \
    }                                                                                          \
    static inline T gap_below_##SUFFIX(T g, int64_t d) {                                       \
        return g * (1 - (T)(d + 8) * EPS_OF(T));                                               \
    }                                                                                          \
                                                                                               \
    /* v at column j becomes the least so far where it is below it (ties: the lower            \
     * column), as the lanes' minima keep it. */                                               \
    static inline void keep_least_##SUFFIX(T v, int64_t j, T *best, int64_t *at) {             \
        if (v < *best || (v == *best && j < *at)) {                                            \
            *best = v;                                                                         \
            *at = j;                                                                           \
        }                                                                                      \
    }                                                                                          \
                                                                                               \
    /* At least the second smallest of own and the lanes' best and next (each lane's two       \
     * smallest), exactly that unless two lanes tie for the smallest best: where own is not    \
     * below the least best, the lanes holding it offer their next instead. */                 \
    static inline T second_so_far_##SUFFIX(V best, V next, T own) {                            \
        const T least = hmin_##SUFFIX(best);                                                   \
        if (own < least) return least;                                                         \
        const T rest = hmin_##SUFFIX(select_##SUFFIX(best == least, next, best));              \
        return rest < own ? rest : own;                                                        \
    }                                                                                          \
                                                                                               \
    /* Row x's nearest centre from its old one a's neighbour list (centre_neighbours), where   \
     * the triangle inequality decides it: u bounds ||x - c_a|| from above, so a centre j at   \
     * gap g_j from c_a is at least g_j - u from x, and the scan stops once that reaches the   \
     * second smallest distance found. LANES candidates at a time, each lane keeping its two   \
     * smallest (ties: the lower index). Writes lab, its partial distance p and a lower bound  \
     * on the distance to every other centre, and adds the candidates computed to *scanned;    \
     * returns 0 (lab, p, lower not written) when the list ends before it decides the          \
     * nearest. The gaps are lowered by the margin. second_p (or NULL) gets the partial        \
     * distance of the second nearest where the list decides it too, else +inf. */             \
    static inline int neighbour_scan_##SUFFIX(const T *restrict x, int64_t d, T x_sq,          \
                                              const T *restrict CT, const T *restrict c_sq,    \
                                              int64_t kp, int64_t a, T u, T margin,            \
                                              const T *restrict list,                          \
                                              const int32_t *restrict order,                   \
                                              const T *restrict gap, int64_t width,            \
                                              int64_t *lab, T *p, T *lower,                    \
                                              int64_t *scanned, T *second_p) {                 \
        const T own = partial_to_##SUFFIX(x, d, CT, c_sq, kp, a);                              \
        V best = (V){0} + (T)INFINITY, next = best;                                            \
        V##_index at = (V##_index){0} - 1; /* padding (-1, +inf) never takes a lane */         \
        int decided = 0;                                                                       \
        int64_t r = 0;                                                                         \
        for (; r < width; r += LANES) {                                                        \
            const T reach = gap[r] - margin - u;                                               \
            if (r > 0 && reach > 0 &&                                                          \
                reach * reach >= second_so_far_##SUFFIX(best, next, own) + x_sq) {             \
                decided = 1;                                                                   \
                break;                                                                         \
            }                                                                                  \
            const V s = list_partials_##SUFFIX(x, d, list, width, r);                          \
            V##_index idx;                                                                     \
            UNROLL for (int l = 0; l < LANES; l++) idx[l] = (I)order[r + l];                   \
            const V##_index lower_idx = (s < best) | ((s == best) & (idx < at));               \
            const V bigger = select_##SUFFIX(lower_idx, best, s);                              \
            next = select_##SUFFIX(bigger < next, bigger, next);                               \
            best = select_##SUFFIX(lower_idx, s, best);                                        \
            at = (idx & lower_idx) | (at & ~lower_idx);                                        \
        }                                                                                      \
        *scanned += r;                                                                         \
        T b;                                                                                   \
        int64_t j = reduce_##SUFFIX(best, at, &b);                                             \
        T second = second_of_##SUFFIX(best, at, next, j);                                      \
        if (own < b || (own == b && a < j)) { /* the old centre is still the nearest */        \
            second = b < second ? b : second;                                                  \
            b = own;                                                                           \
            j = a;                                                                             \
        } else {                                                                               \
            second = own < second ? own : second;                                              \
        }                                                                                      \
        T second_dist = second + x_sq;                                                         \
        second_dist = ROOT(T, second_dist < (T)0 ? (T)0 : second_dist);                        \
        int second_known = decided;                                                            \
        if (!decided) { /* past the list: at least tail from x */                              \
            const T tail = gap[width - 1] - margin - u;                                        \
            if (!(tail > 0 && tail * tail >= b + x_sq)) return 0;                              \
            second_known = tail * tail >= second + x_sq;                                       \
            second_dist = tail < second_dist ? tail : second_dist;                             \
        }                                                                                      \
        if (second_p) *second_p = second_known ? second : (T)INFINITY;                         \
        *lab = j;                                                                              \
        *p = b;                                                                                \
        *lower = second_dist - margin;                                                         \
        return 1;                                                                              \
    }                                                                                          \
                                                                                               \
    /* Row i labelled from its old centre's neighbour list (neighbour_scan: nb, order, gap,    \
     * width), its bounds and the sums as relabel's; returns 0 (nothing written) where the     \
     * list does not decide. */                                                                \
    static inline int by_neighbours_##SUFFIX(const struct bounded_##SUFFIX *b,                 \
                                             const T *restrict nb,                             \
                                             const int32_t *restrict order,                    \
                                             const T *restrict gap, int64_t width, int64_t i,  \
                                             int64_t *scanned) {                               \
        const int64_t a = b->labels[i], d = b->d;                                              \
        int64_t lab;                                                                           \
        T p, other;                                                                            \
        if (!neighbour_scan_##SUFFIX(b->X + i * d, d, b->x_sq[i], b->CT, b->c_sq, b->kp, a,    \
                                     b->upper[i], b->margin, nb + a * (d + 1) * width,         \
                                     order + a * width, gap + a * width, width, &lab, &p,      \
                                     &other, scanned, NULL))                                   \
            return 0;                                                                          \
        bound_row_##SUFFIX(b, 1, i, lab, p, other);                                            \
        return 1;                                                                              \
    }                                                                                          \
                                                                                               \
    /* A Lloyd pass over a block with Hamerly's bounds (direct distances only). upper: a       \
     * bound on the distance (not squared) to the row's centre plus the margin; lower: on      \
     * the distance to any other. start 1: every row labelled and its bounds set, every row    \
     * added to the sums; start 2: the same, the rows whose label changed moved between the    \
     * sums (those of the labels). start 0: the bounds moved by the centres' drift (own: how   \
     * far each centre moved; others: the farthest any other did; half_gap: half the           \
     * distance to the nearest other centre, less the margin), and only the rows whose         \
     * bounds fail are labelled again (their min_dist set) and, if their label changed,        \
     * moved between the sums: from their old centre's neighbour list where nb is not NULL     \
     * and it decides (centre_neighbours: nb, order, gap, width; near: the farthest any        \
     * centre of each list moved, which with the lists' last gaps moves the lower bounds       \
     * less than others; counts, if not NULL, gets how many rows the lists decided and the     \
     * candidates they computed), else against every centre, ROWS at a time in the rows'       \
     * order. Returns the rows labelled again. */                                              \
    int64_t lloyd_bounded_##SUFFIX(const T *restrict X, int64_t m, int64_t d,                  \
                                   const T *restrict x_sq, const T *restrict CT,               \
                                   const T *restrict c_sq, int64_t kp, const T *restrict w,    \
                                   int64_t *restrict labels, T *restrict min_dist,             \
                                   T *restrict upper, T *restrict lower,                       \
                                   const T *restrict own, const T *restrict others,            \
                                   const T *restrict near, const T *restrict half_gap,         \
                                   T margin,                                                   \
                                   const T *restrict nb, const int32_t *restrict order,        \
                                   const T *restrict gap, int64_t width, int64_t *counts,      \
                                   double *restrict num, double *restrict den, int start) {    \
        const struct bounded_##SUFFIX b = {.X = X, .x_sq = x_sq, .CT = CT, .c_sq = c_sq,       \
                                           .w = w, .d = d, .kp = kp, .labels = labels,         \
                                           .min_dist = min_dist, .upper = upper,               \
                                           .lower = lower, .margin = margin, .num = num,       \
                                           .den = den};                                        \
        int64_t relabelled = 0, by_lists = 0, scanned = 0, pending[ROWS], fail[BOUND_SPAN];    \
        T was[BOUND_SPAN];                                                                     \
        const T *lists_near = nb ? near : NULL;                                                \
        const int mode = start == 1 ? 0 : 1; /* finish_row's: add every row, or move */       \
        int waiting = 0;                                                                       \
        for (int64_t i0 = 0; i0 < m; i0 += BOUND_SPAN) {                                       \
            const int64_t i1 = i0 + BOUND_SPAN < m ? i0 + BOUND_SPAN : m;                      \
            int64_t failed = i1 - i0;                                                          \
            if (start) {                                                                       \
                for (int64_t f = 0; f < failed; f++) fail[f] = i0 + f;                         \
            } else {                                                                           \
                failed = failing_##SUFFIX(labels, i0, i1, upper, lower, own, others,           \
                                          lists_near, gap, width, half_gap, fail, was);        \
                failed = still_failing_##SUFFIX(X, d, CT, kp, labels, upper, lower, others,    \
                                                lists_near, gap, width, half_gap, margin,      \
                                                fail, was, failed);                            \
            }                                                                                  \
            relabelled += failed;                                                              \
            for (int64_t f = 0; f < failed; f++) {                                             \
                const int64_t i = fail[f];                                                     \
                if (!start && nb &&                                                            \
                    by_neighbours_##SUFFIX(&b, nb, order, gap, width, i, &scanned)) {          \
                    by_lists++;                                                                \
                    continue;                                                                  \
                }                                                                              \
                pending[waiting++] = i;                                                        \
                if (waiting < ROWS) continue;                                                  \
                relabel_##SUFFIX(&b, mode, pending, waiting);                                  \
                waiting = 0;                                                                   \
            }                                                                                  \
        }                                                                                      \
        if (waiting) relabel_##SUFFIX(&b, mode, pending, waiting);                             \
        if (counts) {                                                                          \
            counts[0] = by_lists;                                                              \
            counts[1] = scanned;                                                               \
        }                                                                                      \
        return relabelled;                                                                     \
    }                                                                                          \
                                                                                               \
    /* Row i's nearest centre lab (partial distance p) and second-nearest partial distance     \
     * p2, written as lloyd_block writes them with second (mode as finish_row's). */           \
    static inline void two_row_##SUFFIX(const struct bounded_##SUFFIX *b, int mode,            \
                                        T *restrict second, int64_t i, int64_t lab, T p, T p2, \
                                        double *total) {                                       \
        finish_row_##SUFFIX(b->X, b->d, b->x_sq, b->w, b->labels, b->min_dist, b->num, b->den, \
                            mode, i, lab, p, total);                                           \
        const T dist = p2 + b->x_sq[i];                                                        \
        second[i] = dist < (T)0 ? (T)0 : dist;                                                 \
    }                                                                                          \
                                                                                               \
    /* two_row for up to ROWS rows (indices at) against every centre. */                       \
    static inline void two_of_##SUFFIX(const struct bounded_##SUFFIX *b, int mode,             \
                                       T *restrict second, const int64_t *at, int rows,        \
                                       double *total) {                                        \
        int64_t lab[ROWS];                                                                     \
        T p[ROWS], p2[ROWS];                                                                   \
        nearest_of_##SUFFIX(b, at, rows, lab, p, p2);                                          \
        for (int r = 0; r < rows; r++)                                                         \
            two_row_##SUFFIX(b, mode, second, at[r], lab[r], p[r], p2[r], total);              \
    }                                                                                          \
                                                                                               \
    /* Each row's nearest and second-nearest centre, as lloyd_block writes them with second    \
     * (labels, min_dist, second; every row added to the sums num, den where they are not      \
     * NULL; returns sum_i w_i min_dist_i in *inertia), from the neighbour list of its centre  \
     * so far (labels[i], in: any centre) where the triangle inequality decides both           \
     * (neighbour_scan, u the distance to that centre plus the margin), else against every     \
     * centre, ROWS at a time. Returns the rows the lists decided and adds the candidates      \
     * they computed to *scanned. */                                                           \
    int64_t two_nearest_listed_##SUFFIX(const T *restrict X, int64_t m, int64_t d,             \
                                        const T *restrict x_sq, const T *restrict CT,          \
                                        const T *restrict c_sq, int64_t kp,                    \
                                        const T *restrict w, int64_t *restrict labels,         \
                                        T *restrict min_dist, T *restrict second, T margin,    \
                                        const T *restrict nb, const int32_t *restrict order,   \
                                        const T *restrict gap, int64_t width,                  \
                                        int64_t *scanned, double *restrict num,                \
                                        double *restrict den, double *inertia) {               \
        const struct bounded_##SUFFIX b = {.X = X, .x_sq = x_sq, .CT = CT, .c_sq = c_sq,       \
                                           .w = w, .d = d, .kp = kp, .labels = labels,         \
                                           .min_dist = min_dist, .margin = margin, .num = num, \
                                           .den = den};                                        \
        const int mode = num ? 0 : 2; /* add every row, or label only */                       \
        int64_t decided = 0, pending[ROWS];                                                    \
        int waiting = 0;                                                                       \
        double total = 0.0;                                                                    \
        for (int64_t i = 0; i < m; i++) {                                                      \
            const T *x = X + i * d;                                                            \
            const int64_t a = labels[i];                                                       \
            const T dist = partial_to_##SUFFIX(x, d, CT, c_sq, kp, a) + x_sq[i];               \
            const T u = ROOT(T, dist < (T)0 ? (T)0 : dist) + margin;                           \
            int64_t lab;                                                                       \
            T p, lower, p2;                                                                    \
            if (neighbour_scan_##SUFFIX(x, d, x_sq[i], CT, c_sq, kp, a, u, margin,             \
                                        nb + a * (d + 1) * width, order + a * width,           \
                                        gap + a * width, width, &lab, &p, &lower, scanned,     \
                                        &p2) &&                                                \
                p2 < (T)INFINITY) {                                                            \
                decided++;                                                                     \
                two_row_##SUFFIX(&b, mode, second, i, lab, p, p2, &total);                     \
                continue;                                                                      \
            }                                                                                  \
            pending[waiting++] = i;                                                            \
            if (waiting < ROWS) continue;                                                      \
            two_of_##SUFFIX(&b, mode, second, pending, waiting, &total);                       \
            waiting = 0;                                                                       \
        }                                                                                      \
        if (waiting) two_of_##SUFFIX(&b, mode, second, pending, waiting, &total);              \
        *inertia = total;                                                                      \
        return decided;                                                                        \
    }                                                                                          \
                                                                                               \
    /* Row minima of a block of partial distances D (m x k, rows ldd apart, any k): d_min,     \
     * the nearest column (lowest index), min_dist = max(d_min + x_sq, 0) and, where counts    \
     * is not NULL, the columns below d_min + threshold. Returns the rows with more than one   \
     * such column (0 without counts). */                                                      \
    int64_t row_minima_##SUFFIX(const T *restrict D, int64_t m, int64_t k, int64_t ldd,        \
                                const T *restrict x_sq, T threshold, T *restrict d_min,        \
                                int64_t *restrict labels, T *restrict min_dist,                \
                                int32_t *restrict counts) {                                    \
        const int64_t body = k - k % LANES;                                                    \
        int64_t several = 0;                                                                   \
        for (int64_t i = 0; i < m; i++) {                                                      \
            const T *row = D + i * ldd;                                                        \
            T p;                                                                               \
            int64_t lab = 0;                                                                   \
            if (body) lab = nearest_row_##SUFFIX(row, body, &p, NULL);                         \
            else p = INFINITY;                                                                 \
            for (int64_t j = body; j < k; j++)                                                 \
                if (row[j] < p || (body == 0 && j == 0)) {                                     \
                    p = row[j];                                                                \
                    lab = j;                                                                   \
                }                                                                              \
            d_min[i] = p;                                                                      \
            labels[i] = lab;                                                                   \
            T dist = p + x_sq[i];                                                              \
            min_dist[i] = dist < (T)0 ? (T)0 : dist;                                           \
            if (counts) {                                                                      \
                const T bound = p + threshold;                                                 \
                int32_t c = 0;                                                                 \
                for (int64_t j = 0; j < k; j++) c += row[j] < bound;                           \
                counts[i] = c;                                                                 \
                several += c > 1;                                                              \
            }                                                                                  \
        }                                                                                      \
        return several;                                                                        \
    }

/* entmax15 of rows of scores (Peters, Niculae and Martins, 2019), with the sums an
 * annealing pass needs: q = [z/2 - max/2 - tau]_+^2 with tau the exact threshold,
 * -sigma sum_j q_j z_j (the distance the row spends above its nearest),
 * (4/3)(1 - sum_j q_j^1.5) (Tsallis entropy) and the support's size. Only scores with
 * x = (z - max)/2 > -1 can be in the support (tau >= -1), so only those are copied into
 * `work` (width values) and searched.
 *
 * The threshold without a sort: the `entmax` package sorts x descending and keeps the
 * longest prefix whose tau (the lesser root of sum_prefix (x_i - tau)^2 = 1) is at most its
 * last value. That holds for x_j exactly when sum_{x_i >= x_j} (x_i - x_j)^2 <= 1, a sum
 * that grows as x_j falls, so the support is the values passing this test, and a
 * quickselect finds the least of them in linear expected time: each round splits the
 * candidates about a pivot and keeps the half the test leaves open, carrying the count,
 * sum and sum of squares of the values already known to be in. Wide supports (hundreds of
 * centres within reach at a hot temperature and large k) are no longer sorted. */
#define ENTMAX15_ROWS(T, SUFFIX)                                                               \
    static inline T median3_##SUFFIX(T a, T b, T c) {                                          \
        if (a > b) {                                                                           \
            const T t = a;                                                                     \
            a = b;                                                                             \
            b = t;                                                                             \
        }                                                                                      \
        return c < a ? a : (c > b ? b : c);                                                    \
    }                                                                                          \
                                                                                               \
    /* The support's count, sum and sum of squares among the n values v (reordered). */        \
    static void entmax15_support_##SUFFIX(T *restrict v, int64_t n, double in[3]) {            \
        int64_t lo = 0, hi = n;                                                                \
        in[0] = in[1] = in[2] = 0.0;                                                           \
        while (lo < hi) {                                                                      \
            const T pivot = median3_##SUFFIX(v[lo], v[lo + (hi - lo) / 2], v[hi - 1]);         \
            int64_t gt = lo, i = lo, lt = hi; /* v[lo:gt] > pivot > v[lt:hi] */                \
            double count = in[0], sum = in[1], sum_sq = in[2];                                 \
            while (i < lt) {                                                                   \
                const T x = v[i];                                                              \
                if (x > pivot) {                                                               \
                    v[i++] = v[gt];                                                            \
                    v[gt++] = x;                                                               \
                    count += 1.0;                                                              \
                    sum += x;                                                                  \
                    sum_sq += (double)x * x;                                                   \
                } else if (x < pivot) {                                                        \
                    v[i] = v[--lt];                                                            \
                    v[lt] = x;                                                                 \
                } else {                                                                       \
                    i++;                                                                       \
                }                                                                              \
            }                                                                                  \
            const double p = pivot;                                                            \
            if (sum_sq - 2.0 * p * sum + count * p * p > 1.0) {                                \
                hi = gt; /* the pivot is out, and all below it */                              \
                continue;                                                                      \
            }                                                                                  \
            const double ties = (double)(lt - gt);                                             \
            in[0] = count + ties;                                                              \
            in[1] = sum + ties * p;                                                            \
            in[2] = sum_sq + ties * p * p;                                                     \
            lo = lt; /* the pivot is in, and all above it */                                   \
        }                                                                                      \
    }                                                                                          \
                                                                                               \
    /* entmax15 of one row of width scores z into q (which may be z), its                      \
     * sum_j q_j z_j, sum_j q_j^1.5 and support size. */                                       \
    static void entmax15_row_##SUFFIX(const T *zi, int64_t width, T *qi, T *restrict work,     \
                                      double *spent, double *power, int32_t *support) {        \
        T top = zi[0];                                                                         \
        for (int64_t j = 1; j < width; j++) top = zi[j] > top ? zi[j] : top;                   \
        int64_t n = 0;                                                                         \
        for (int64_t j = 0; j < width; j++) {                                                  \
            const T x = (zi[j] - top) / 2;                                                     \
            if (x > (T)-1) work[n++] = x;                                                      \
        }                                                                                      \
        double in[3];                                                                          \
        entmax15_support_##SUFFIX(work, n, in);                                                \
        const double mean = in[1] / in[0];                                                     \
        const double delta = (1.0 - (in[2] - in[1] * mean)) / in[0];                           \
        const T tau_star = (T)(mean - sqrt(delta > 0.0 ? delta : 0.0));                        \
        double spent_i = 0.0, power_i = 0.0;                                                   \
        int32_t nonzero = 0;                                                                   \
        for (int64_t j = 0; j < width; j++) {                                                  \
            const T zj = zi[j]; /* q may be z itself: read before writing */                   \
            T v = (zj - top) / 2 - tau_star;                                                   \
            v = v > (T)0 ? v * v : (T)0;                                                       \
            qi[j] = v;                                                                         \
            if (v > (T)0) {                                                                    \
                nonzero++;                                                                     \
                spent_i += (double)v * zj;                                                     \
                power_i += (double)v * sqrt((double)v);                                        \
            }                                                                                  \
        }                                                                                      \
        *spent = spent_i;                                                                      \
        *power = power_i;                                                                      \
        *support = nonzero;                                                                    \
    }                                                                                          \
                                                                                               \
    void entmax15_rows_##SUFFIX(const T *z, int64_t r, int64_t width, int64_t ldz, T sigma,    \
                                T *q, int64_t ldq, T *restrict spent,                          \
                                T *restrict tsallis, int32_t *restrict support,                \
                                T *restrict work) {                                            \
        for (int64_t i = 0; i < r; i++) {                                                      \
            double spent_i, power;                                                             \
            entmax15_row_##SUFFIX(z + i * ldz, width, q + i * ldq, work, &spent_i, &power,     \
                                  support + i);                                                \
            spent[i] = (T)(-(double)sigma * spent_i);                                          \
            tsallis[i] = (T)((4.0 / 3.0) * (1.0 - power));                                     \
        }                                                                                      \
    }

ENTMAX15_ROWS(float, f32)
ENTMAX15_ROWS(double, f64)

/* One sweep of Hartigan's method (Hartigan and Wong, 1979; Telgarsky and Vattani, 2010):
 * each point in turn moves to the cluster where it costs least, counting the shift of
 * both means: leaving a (mass M_a) saves w M_a/(M_a - w) ||x - m_a||^2, joining b costs
 * w M_b/(M_b + w) ||x - m_b||^2. The means and masses (float64) follow every move, so the
 * inertia falls with each; a point alone in its cluster stays, and an empty cluster takes
 * no one. Every Hartigan fixed point is a Lloyd fixed point, not conversely: on clusters
 * that touch, the sweep moves the boundary where Lloyd sees no reason to. A move must save
 * more than min_gain of what leaving saves (no cycling on rounding).
 *
 * lower[i] bounds the distance (not squared) from point i to every other cluster's mean
 * as of the last sweep's start or the point's pricing since; this sweep first lowers it by
 * `travel` (from the caller: the longest path of a mean over the last sweep), and a mean
 * has since moved at most its path in this sweep so far. A cluster that the bound shows
 * cannot pay for the point's leaving, at its M/(M + w), is not priced, and a point that
 * no cluster can pay for (the lightest, at the longest path) is passed over. With
 * `order` (k x width: for each cluster its nearest by their means' distance `gaps` at the
 * sweep's start, ascending; may be NULL), only the clusters near enough to its own are
 * priced for a point (Elkan's triangle inequality between means; see price_all). Returns
 * the number of moves and writes the inertia they saved to *saved. A sweep may be made of
 * calls on consecutive blocks of rows: path (k doubles, each mean's path in this sweep)
 * is zeroed by the caller at the sweep's start and carried from call to call. x is
 * scratch of d doubles, mark of k zeroed bytes. */
#define HARTIGAN_CHUNK 8

static double squared_gap(const double *x, const double *m, int64_t d) {
    double acc[HARTIGAN_CHUNK] = {0.0}, s = 0.0;
    int64_t j = 0;
    for (; j + HARTIGAN_CHUNK <= d; j += HARTIGAN_CHUNK)
        for (int64_t l = 0; l < HARTIGAN_CHUNK; l++)
            acc[l] += (x[j + l] - m[j + l]) * (x[j + l] - m[j + l]);
    for (; j < d; j++) s += (x[j] - m[j]) * (x[j] - m[j]);
    for (int64_t l = 0; l < HARTIGAN_CHUNK; l++) s += acc[l];
    return s;
}

/* One point's pricing: the best cost so far (leaving, at first) and its cluster, and the
 * two nearest priced means' squared distances with the nearest's cluster, and the least
 * squared distance any unpriced mean is known to be at. */
typedef struct {
    double best, near, next, unpriced;
    int64_t target, nearest;
} Pricing;

/* The clusters as a sweep prices them: means (k x d) and masses, each mean's path in this
 * sweep, and the sorted gaps (see hartigan_sweep) with `mark`, k zeroed bytes. */
typedef struct {
    double *means, *mass;
    const double *path;
    int64_t d, k;
    const int64_t *order;
    const double *gaps;
    int64_t width;
    unsigned char *mark;
} Clusters;

/* Price cluster b for the point x of cluster a and weight wi, whose distance to every
 * other mean was at least `bound` at the sweep's start: b's mean has since moved at most
 * its path. */
static void price(Pricing *p, const Clusters *c, const double *x, int64_t a, int64_t b,
                  double wi, double bound) {
    if (b == a || !(c->mass[b] > 0.0)) return;
    const double factor = c->mass[b] / (c->mass[b] + wi);
    const double gap = bound - c->path[b], floor = gap > 0.0 ? gap * gap : 0.0;
    if (factor * floor >= p->best) { /* at least floor away: cannot pay */
        p->unpriced = p->unpriced < floor ? p->unpriced : floor;
        return;
    }
    const double s = squared_gap(x, c->means + b * c->d, c->d);
    if (s < p->near) {
        p->next = p->near;
        p->near = s;
        p->nearest = b;
    } else if (s < p->next) {
        p->next = s;
    }
    if (s * factor < p->best) {
        p->best = s * factor;
        p->target = b;
    }
}

/* Price the clusters that can pay for a point of cluster a at x: with `order`, a's
 * `width` nearest clusters by the means' distances `gaps` at the sweep's start, up to
 * `reach` (a mean farther than that from a's is still at least sqrt(far) from x), then,
 * if the list ran out within reach, every cluster not in it (`mark`, left zeroed);
 * without, every cluster. */
static void price_all(Pricing *p, const Clusters *c, const double *x, int64_t a, double wi,
                      double bound, double reach, double far) {
    if (!c->order) {
        for (int64_t b = 0; b < c->k; b++) price(p, c, x, a, b, wi, bound);
        return;
    }
    const int64_t *near = c->order + a * c->width;
    const double *gaps = c->gaps + a * c->width;
    for (int64_t o = 0; o < c->width; o++) {
        if (gaps[o] >= reach) {
            p->unpriced = p->unpriced < far ? p->unpriced : far;
            return;
        }
        price(p, c, x, a, near[o], wi, bound);
    }
    if (c->width == c->k) return;
    for (int64_t o = 0; o < c->width; o++) c->mark[near[o]] = 1;
    for (int64_t b = 0; b < c->k; b++)
        if (!c->mark[b]) price(p, c, x, a, b, wi, bound);
    for (int64_t o = 0; o < c->width; o++) c->mark[near[o]] = 0;
}

#define HARTIGAN_SWEEP(T, SUFFIX)                                                              \
    int64_t hartigan_sweep_##SUFFIX(const T *X, int64_t n, int64_t d, const T *w,              \
                                    int64_t *labels, int64_t k, double *means, double *mass,   \
                                    double *lower, double travel, const int64_t *order,        \
                                    const double *gaps, int64_t width, double min_gain,        \
                                    double *x, double *path, unsigned char *mark,              \
                                    double *saved) {                                           \
        const Clusters clusters = {means, mass, path, d, k, order, gaps, width, mark};         \
        double lightest = INFINITY, longest = 0.0, gain = 0.0;                                 \
        for (int64_t c = 0; c < k; c++) {                                                      \
            if (mass[c] > 0.0 && mass[c] < lightest) lightest = mass[c];                       \
            longest = path[c] > longest ? path[c] : longest;                                   \
        }                                                                                      \
        int64_t moves = 0;                                                                     \
        for (int64_t i = 0; i < n; i++) {                                                      \
            const double wi = w ? (double)w[i] : 1.0;                                          \
            const int64_t a = labels[i];                                                       \
            lower[i] -= travel; /* as of this sweep's start */                                 \
            if (!(wi > 0.0) || !(mass[a] - wi > 0.0)) continue;                                \
            for (int64_t j = 0; j < d; j++) x[j] = (double)X[i * d + j];                       \
            double *ma = means + a * d;                                                        \
            const double da = squared_gap(x, ma, d);                                           \
            const double freed = da * mass[a] / (mass[a] - wi);                                \
            const double leave = freed * (1.0 - min_gain);                                     \
            const double bound = lower[i] - longest;                                           \
            const double floor = bound > 0.0 ? bound * bound : 0.0;                            \
            const double f_min = lightest / (lightest + wi);                                   \
            if (f_min * floor >= leave) continue;                                              \
            Pricing p = {leave, INFINITY, INFINITY, INFINITY, -1, -1};                         \
            const double reach = sqrt(da) + sqrt(leave / f_min) + 2.0 * longest;               \
            price_all(&p, &clusters, x, a, wi, lower[i], reach, leave / f_min);                \
            if (p.target < 0) {                                                                \
                lower[i] = sqrt(p.near < p.unpriced ? p.near : p.unpriced);                    \
                continue;                                                                      \
            }                                                                                  \
            /* The others are now a (which moves away from x) and all but the target. */       \
            double other = p.target == p.nearest ? p.next : p.near;                            \
            other = other < p.unpriced ? other : p.unpriced;                                   \
            lower[i] = sqrt(da < other ? da : other);                                          \
            const int64_t b = p.target;                                                        \
            double *mb = means + b * d;                                                        \
            const double leaving = wi / (mass[a] - wi), joining = wi / (mass[b] + wi);         \
            for (int64_t j = 0; j < d; j++) {                                                  \
                ma[j] += (ma[j] - x[j]) * leaving;                                             \
                mb[j] += (x[j] - mb[j]) * joining;                                             \
            }                                                                                  \
            path[a] += sqrt(da) * leaving;                                                     \
            path[b] += sqrt(p.best / mass[b] * (mass[b] + wi)) * joining;                      \
            longest = path[a] > longest ? path[a] : longest;                                   \
            longest = path[b] > longest ? path[b] : longest;                                   \
            mass[a] -= wi;                                                                     \
            mass[b] += wi;                                                                     \
            lightest = mass[a] < lightest ? mass[a] : lightest;                                \
            labels[i] = b;                                                                     \
            gain += wi * (freed - p.best);                                                     \
            moves++;                                                                           \
        }                                                                                      \
        *saved = gain;                                                                         \
        return moves;                                                                          \
    }

HARTIGAN_SWEEP(float, f32)
HARTIGAN_SWEEP(double, f64)

/* One step of splitting every cluster in two (rbfkm_engine/search_passes.py,
 * cluster_halves), in float64: steps before `power` are power iterations of each
 * cluster's scatter about its centre C (k x d) on `axis` (k x d), the later ones 2-means
 * steps within the cluster, the first from the side of the centre along the axis, each
 * after from the side of the nearer half. `mode` 0 starts the step, 1 adds the m rows
 * X (their labels and weights w, NULL: all 1) to it, block after block, 2 ends it:
 * `axis` becomes the scatter times it, or `halves` (k x 2 x d) and `mass` (k x 2) the
 * halves' means (a half without weight keeps its centre) and weights. Rows of a cluster
 * with only[c] == 0 are left out (only may be NULL). State between calls: `along` and
 * `normal` (k x d), `weight` and `at` (k). */
#define CLUSTER_HALVES(T, SUFFIX)                                                              \
    void cluster_halves_##SUFFIX(const T *X, int64_t m, int64_t d, const T *w,                 \
                                 const int64_t *labels, int64_t k, const double *C,            \
                                 const unsigned char *only, int64_t step, int64_t power,       \
                                 int64_t mode, double *axis, double *halves, double *mass,     \
                                 double *along, double *weight, double *normal, double *at) {  \
        const int split = step >= power;                                                       \
        if (mode == 0) {                                                                       \
            for (int64_t c = 0; c < k && step <= power; c++) { /* after: set by the halves */  \
                double *a = axis + c * d, norm = 0.0;                                          \
                for (int64_t j = 0; j < d && !split; j++) norm += a[j] * a[j];                 \
                norm = split ? 1.0 : (sqrt(norm) > 1e-30 ? sqrt(norm) : 1e-30);                \
                at[c] = 0.0; /* the centre along its (unit, while iterating) axis */           \
                for (int64_t j = 0; j < d; j++) {                                              \
                    a[j] /= norm;                                                              \
                    normal[c * d + j] = a[j];                                                  \
                    at[c] += C[c * d + j] * a[j];                                              \
                }                                                                              \
            }                                                                                  \
            const size_t sums = (size_t)(split ? 2 * k : k);                                   \
            memset(split ? halves : along, 0, sums * (size_t)d * sizeof(double));              \
            memset(split ? mass : weight, 0, sums * sizeof(double));                           \
            return;                                                                            \
        }                                                                                      \
        if (mode == 1) {                                                                       \
            for (int64_t i = 0; i < m; i++) {                                                  \
                const int64_t c = labels[i];                                                   \
                if (only && !only[c]) continue;                                                \
                const T *x = X + i * d;                                                        \
                const double *v = normal + c * d, wi = w ? (double)w[i] : 1.0;                 \
                double proj = 0.0;                                                             \
                for (int64_t j = 0; j < d; j++) proj += (double)x[j] * v[j];                   \
                if (split) {                                                                   \
                    const int64_t slot = 2 * c + (proj > at[c]);                               \
                    for (int64_t j = 0; j < d; j++) halves[slot * d + j] += wi * (double)x[j]; \
                    mass[slot] += wi;                                                          \
                } else {                                                                       \
                    proj = (proj - at[c]) * wi;                                                \
                    for (int64_t j = 0; j < d; j++) along[c * d + j] += (double)x[j] * proj;   \
                    weight[c] += proj;                                                         \
                }                                                                              \
            }                                                                                  \
            return;                                                                            \
        }                                                                                      \
        for (int64_t c = 0; c < k; c++) {                                                      \
            if (!split) { /* the scatter times the axis, where it is not zero */               \
                double *s = along + c * d, norm = 0.0;                                         \
                for (int64_t j = 0; j < d; j++) {                                              \
                    s[j] -= C[c * d + j] * weight[c];                                          \
                    norm += s[j] * s[j];                                                       \
                }                                                                              \
                if (norm > 0.0) memcpy(axis + c * d, s, (size_t)d * sizeof(double));           \
                continue;                                                                      \
            }                                                                                  \
            double *h0 = halves + 2 * c * d, *h1 = h0 + d, sq0 = 0.0, sq1 = 0.0;               \
            for (int64_t side = 0; side < 2; side++) {                                         \
                double *h = side ? h1 : h0;                                                    \
                const double mh = mass[2 * c + side];                                          \
                for (int64_t j = 0; j < d; j++) h[j] = mh > 0.0 ? h[j] / mh : C[c * d + j];    \
            }                                                                                  \
            for (int64_t j = 0; j < d; j++) { /* nearer h1: x . (h1 - h0) > at */              \
                normal[c * d + j] = h1[j] - h0[j];                                             \
                sq0 += h0[j] * h0[j];                                                          \
                sq1 += h1[j] * h1[j];                                                          \
            }                                                                                  \
            at[c] = 0.5 * (sq1 - sq0);                                                         \
        }                                                                                      \
    }

CLUSTER_HALVES(float, f32)
CLUSTER_HALVES(double, f64)

LLOYD_KERNELS(float, vfloat, int32_t, 8, f32, FLT_MIN)
LLOYD_KERNELS(double, vdouble, int64_t, 4, f64, DBL_MIN)

/* One block of an entmax15 pass at temperature sigma, fused (rbfkm_engine/passes.py,
 * Workspace.step): each row's partial distances (direct from CT, or read from D as in
 * lloyd_block), its nearest centre and squared distance, its responsibilities and its
 * shares of the sums. The map covers the centres within 2 sigma of the nearest, the only
 * ones the support can hold (a row with one such centre is one-hot). Added to, in
 * float64: the M-step sums num (k x d) and den (k), the spread sum_i w_i R_ij
 * ||x_i - c_j||^2 (k; may be NULL) and stats: [0] sum_i w_i energy_i (sum_j R_ij D_ij -
 * sigma H(R_i)), [1] sum_i w_i min_dist_i, [2] the nonzero responsibilities (a centre's
 * twin, column j + twins, counted with the centre; twins = k without twins), [3] the rows
 * that are not one-hot, [4] their weight, [5] the weight of the rows shared by two centres
 * or more (twins counted likewise), [6] the rows the neighbour lists served and [7] the
 * candidates those computed. labels and min_dist (m) are written. The torch pass's values
 * (assign.py, mstep.py) up to rounding. Scratch: soft_scratch(kp) values of T, 2 kp int64
 * and k bytes, zero (left zero).
 *
 * With neighbour lists (nb, order, gap, width as centre_neighbours makes them; direct
 * distances only), a row whose last label a is a centre's takes its candidates from a's
 * list where the triangle inequality shows the list holds every centre the map may use
 * (soft_reach), and scans every centre otherwise: the same partial distances, the same
 * support in the same column order, so the same values bit for bit, and rows added to the
 * sums in the same order. */
#define SOFT_PASS(T, V, LANES, SUFFIX)                                                         \
    typedef struct {                                                                           \
        const T *X, *x_sq, *w;                                                                 \
        int64_t d, k, kp, twins;                                                               \
        T sigma;                                                                               \
        int64_t *labels;                                                                       \
        T *min_dist;                                                                           \
        double *num, *den, *spread, *stats;                                                    \
        T *z, *q, *work, *pz; /* a row's scores, responsibilities, sort space, partials */     \
        int64_t *cols;        /* the columns of z, q and pz */                                 \
        unsigned char *mark;                                                                   \
    } SoftPass_##SUFFIX;                                                                       \
                                                                                               \
    /* A row's support from its partial distances p (kp columns, padding +inf): the columns    \
     * within 2 sigma of the least, dmin, in column order, their scores (clipped at -4: the    \
     * map's threshold is above it) and partials; returns how many. */                         \
    static int64_t soft_support_##SUFFIX(const SoftPass_##SUFFIX *s, const T *p, T dmin) {     \
        const T sigma = s->sigma;                                                              \
        int64_t n = 0;                                                                         \
        const T bound = dmin + 2 * sigma;                                                      \
        const V limit = (V){0} + bound;                                                        \
        for (int64_t j0 = 0; j0 < s->kp; j0 += LANES) { /* a lane test, then the few in */     \
            V lanes;                                                                           \
            memcpy(&lanes, p + j0, sizeof lanes);                                              \
            if (!any_##SUFFIX(lanes < limit)) continue;                                        \
            const int64_t end = j0 + LANES < s->k ? j0 + LANES : s->k;                         \
            for (int64_t j = j0; j < end; j++) {                                               \
                if (!(p[j] < bound)) continue;                                                 \
                const T score = (p[j] - dmin) / -sigma;                                        \
                s->z[n] = score > (T)-4 ? score : (T)-4;                                       \
                s->pz[n] = p[j];                                                               \
                s->cols[n++] = j;                                                              \
            }                                                                                  \
        }                                                                                      \
        return n;                                                                              \
    }                                                                                          \
                                                                                               \
    /* How far down row i's anchor a's list (a centre, its label at the last pass) the         \
     * centres lie that the row's map may use, or -1 where the list does not reach them.       \
     * The map uses centres within 2 sigma of the nearest in squared distance, and the         \
     * nearest is no farther than c_a: with E the rounding error of a squared distance,        \
     * each such centre's true squared distance is below D_a + 2 sigma + 2 E (D_a: the         \
     * row's computed one to c_a), while a centre at gap g from c_a is at least g - u from     \
     * x, u = sqrt(D_a + E) bounding ||x - c_a||. A centre listed at a gap beyond u +          \
     * sqrt(D_a + 2 sigma + 2 E), or left out (every such one is at least the last gap         \
     * away), is not among them. *own: the row's partial to c_a (CT, c_sq: the centres). */    \
    static int64_t soft_reach_##SUFFIX(const SoftPass_##SUFFIX *s,                             \
                                       const RowLists_##SUFFIX *l, const T *CT,                \
                                       const T *c_sq, int64_t i, int64_t a, T *own) {          \
        *own = partial_to_##SUFFIX(s->X + i * s->d, s->d, CT, c_sq, s->kp, a);                 \
        T dist = *own + s->x_sq[i];                                                            \
        dist = dist < (T)0 ? (T)0 : dist;                                                      \
        const T u = distance_above_##SUFFIX(dist, l->error);                                   \
        const T need = u + distance_above_##SUFFIX(dist + 2 * s->sigma + l->error, l->error);  \
        const T *g = l->gap + a * l->width;                                                    \
        for (int64_t r = 0; r < l->width; r++)                                                 \
            if (gap_below_##SUFFIX(g[r], s->d) >= need) return r;                              \
        return -1;                                                                             \
    }                                                                                          \
                                                                                               \
    /* Row i's support from the first `reach` centres of its anchor a's list and a itself      \
     * (own: its partial), as soft_support gives it from every centre's: the partials of       \
     * the candidates into cp and cand (their columns), their least dmin at the lowest         \
     * column lab, then the support insertion-sorted by column. Returns its size and adds      \
     * the candidates to *scanned. */                                                          \
    static int64_t listed_support_##SUFFIX(const SoftPass_##SUFFIX *s,                         \
                                           const RowLists_##SUFFIX *l, int64_t i, int64_t a,   \
                                           T own, int64_t reach, T *cp, int64_t *cand,         \
                                           int64_t *lab, T *dmin, double *scanned) {           \
        const int64_t d = s->d, width = l->width;                                              \
        const T *x = s->X + i * d, *list = l->nb + a * (d + 1) * width;                        \
        const int32_t *order = l->order + a * width;                                           \
        int64_t m = 1, at = a;                                                                 \
        T best = own;                                                                          \
        cand[0] = a;                                                                           \
        cp[0] = own;                                                                           \
        for (int64_t r0 = 0; r0 < reach; r0 += LANES) {                                        \
            const V v = list_partials_##SUFFIX(x, d, list, width, r0);                         \
            const int64_t end = r0 + LANES < reach ? r0 + LANES : reach;                       \
            for (int64_t r = r0; r < end; r++) {                                               \
                const int64_t j = order[r];                                                    \
                const T p = v[r - r0];                                                         \
                cand[m] = j;                                                                   \
                cp[m++] = p;                                                                   \
                keep_least_##SUFFIX(p, j, &best, &at);                                         \
            }                                                                                  \
        }                                                                                      \
        *scanned += (double)m;                                                                 \
        *lab = at;                                                                             \
        *dmin = best;                                                                          \
        const T bound = best + 2 * s->sigma;                                                   \
        int64_t n = 0;                                                                         \
        for (int64_t c = 0; c < m; c++) {                                                      \
            if (!(cp[c] < bound)) continue;                                                    \
            const T score = (cp[c] - best) / -s->sigma;                                        \
            int64_t r = n++;                                                                   \
            for (; r > 0 && s->cols[r - 1] > cand[c]; r--) {                                   \
                s->cols[r] = s->cols[r - 1];                                                   \
                s->z[r] = s->z[r - 1];                                                         \
                s->pz[r] = s->pz[r - 1];                                                       \
            }                                                                                  \
            s->cols[r] = cand[c];                                                              \
            s->z[r] = score > (T)-4 ? score : (T)-4;                                           \
            s->pz[r] = cp[c];                                                                  \
        }                                                                                      \
        return n;                                                                              \
    }                                                                                          \
                                                                                               \
    /* Row i's responsibilities q on the n columns of its support (one-hot at lab, the         \
     * nearest, where it holds fewer than two); returns how many, writes whether the row       \
     * is soft and its energy (dist: its squared distance to the nearest). */                  \
    static int64_t soft_map_##SUFFIX(const SoftPass_##SUFFIX *s, int64_t n, T dmin,            \
                                     int64_t lab, T dist, int *soft, double *energy) {         \
        const T sigma = s->sigma;                                                              \
        *soft = 0;                                                                             \
        *energy = dist;                                                                        \
        if (n < 2) {                                                                           \
            s->q[0] = 1;                                                                       \
            s->cols[0] = lab;                                                                  \
            s->pz[0] = dmin;                                                                   \
            return 1;                                                                          \
        }                                                                                      \
        double spent, power;                                                                   \
        int32_t support;                                                                       \
        entmax15_row_##SUFFIX(s->z, n, s->q, s->work, &spent, &power, &support);               \
        const T cost = (T)(-(double)sigma * spent);                                            \
        const T entropy = (T)((4.0 / 3.0) * (1.0 - power));                                    \
        *soft = support > 1;                                                                   \
        *energy = (double)(dist + (cost - sigma * entropy));                                   \
        return n;                                                                              \
    }                                                                                          \
                                                                                               \
    /* The centre column j counts with among the nonzeros: its own, or for a twin (j >=        \
     * twins) the centre it is the twin of. */                                                 \
    static inline int64_t soft_centre_##SUFFIX(const SoftPass_##SUFFIX *s, int64_t j) {        \
        return j < s->twins ? j : j - s->twins;                                                \
    }                                                                                          \
                                                                                               \
    /* Row i's share of the pass, from its support (n columns, soft_support's or               \
     * listed_support's), its nearest centre lab and that one's partial dmin. */               \
    static void soft_row_##SUFFIX(const SoftPass_##SUFFIX *s, int64_t i, int64_t support,      \
                                  int64_t lab, T dmin) {                                       \
        const T x_sq = s->x_sq[i];                                                             \
        T dist = dmin + x_sq;                                                                  \
        dist = dist < (T)0 ? (T)0 : dist;                                                      \
        s->labels[i] = lab;                                                                    \
        s->min_dist[i] = dist;                                                                 \
        const double wi = s->w ? (double)s->w[i] : 1.0;                                        \
        int soft;                                                                              \
        double energy;                                                                         \
        const int64_t n = soft_map_##SUFFIX(s, support, dmin, lab, dist, &soft, &energy);      \
        double *stats = s->stats;                                                              \
        stats[0] += wi * energy;                                                               \
        stats[1] += wi * (double)dist;                                                         \
        const T *x = s->X + i * s->d;                                                          \
        int64_t centres = 0; /* the centres the row's nonzeros fall on, twins folded */        \
        for (int64_t r = 0; r < n; r++) {                                                      \
            if (!(s->q[r] > (T)0)) continue;                                                   \
            const int64_t j = s->cols[r], centre = soft_centre_##SUFFIX(s, j);                 \
            centres += !s->mark[centre];                                                       \
            s->mark[centre] = 1;                                                               \
            const double wq = wi * (double)s->q[r];                                            \
            double *a = s->num + j * s->d;                                                     \
            for (int64_t t = 0; t < s->d; t++) a[t] += wq * (double)x[t];                      \
            s->den[j] += wq;                                                                   \
            if (!s->spread) continue;                                                          \
            const T dj = s->pz[r] + x_sq;                                                      \
            s->spread[j] += wq * (double)(dj < (T)0 ? (T)0 : dj);                              \
        }                                                                                      \
        for (int64_t r = 0; r < n; r++) s->mark[soft_centre_##SUFFIX(s, s->cols[r])] = 0;      \
        stats[2] += (double)centres;                                                           \
        stats[3] += soft;                                                                      \
        stats[4] += soft ? wi : 0.0;                                                           \
        stats[5] += centres > 1 ? wi : 0.0; /* shared by two centres, twins folded */          \
    }                                                                                          \
                                                                                               \
    /* The partial distances of the ROWS rows xs to every centre, into part (ROWS x kp), and   \
     * each row's least (dmin) and its column (lab): nearest_row's, kept while the partials    \
     * are in registers rather than read back. */                                              \
    static void soft_partials_##SUFFIX(const T *const xs[ROWS], int64_t d, const T *CT,        \
                                       const T *c_sq, int64_t kp, T *part,                     \
                                       int64_t lab[ROWS], T dmin[ROWS]) {                      \
        V acc[ROWS][GROUPS], best[ROWS];                                                       \
        V##_index at[ROWS], idx = iota_##SUFFIX();                                             \
        UNROLL for (int r = 0; r < ROWS; r++) start_##SUFFIX(&best[r], &at[r]);                \
        for (int64_t j = 0; j < kp;) {                                                         \
            const int G = partials_from_##SUFFIX(xs, d, CT, c_sq, kp, j, acc);                 \
            UNROLL for (int g = 0; g < G; g++) {                                               \
                UNROLL for (int r = 0; r < ROWS; r++) {                                        \
                    memcpy(part + r * kp + j + g * LANES, &acc[r][g], sizeof(V));              \
                    keep_min_##SUFFIX(acc[r][g], idx, &best[r], &at[r]);                       \
                }                                                                              \
                idx += LANES;                                                                  \
            }                                                                                  \
            j += G * LANES;                                                                    \
        }                                                                                      \
        UNROLL for (int r = 0; r < ROWS; r++)                                                  \
            lab[r] = reduce_##SUFFIX(best[r], at[r], &dmin[r]);                                \
    }                                                                                          \
                                                                                               \
    /* The ROWS rows from i (rows of them real) on direct distances: those whose anchor's      \
     * list reaches their support (l not NULL) from it, the others from a scan of every        \
     * centre, computed together; each row's share added in row order. */                      \
    static void soft_group_##SUFFIX(const SoftPass_##SUFFIX *s, const RowLists_##SUFFIX *l,    \
                                    const T *CT, const T *c_sq, int64_t i, int rows,           \
                                    T *part, T *cp, int64_t *cand) {                           \
        int64_t reach[ROWS], lab[ROWS];                                                        \
        T own[ROWS], dmin[ROWS];                                                               \
        const T *xs[ROWS];                                                                     \
        int scans = 0;                                                                         \
        for (int r = 0; r < rows; r++) {                                                       \
            const int64_t a = s->labels[i + r];                                                \
            reach[r] = l && a >= 0 && a < s->k                                                 \
                           ? soft_reach_##SUFFIX(s, l, CT, c_sq, i + r, a, &own[r])            \
                           : -1;                                                               \
            if (reach[r] < 0) xs[scans++] = s->X + (i + r) * s->d;                             \
        }                                                                                      \
        if (scans) {                                                                           \
            for (int r = scans; r < ROWS; r++) xs[r] = xs[scans - 1];                          \
            soft_partials_##SUFFIX(xs, s->d, CT, c_sq, s->kp, part, lab, dmin);                \
        }                                                                                      \
        for (int r = 0, scanned = 0; r < rows; r++) {                                          \
            if (reach[r] < 0) {                                                                \
                const int64_t n = soft_support_##SUFFIX(s, part + scanned * s->kp,             \
                                                        dmin[scanned]);                        \
                soft_row_##SUFFIX(s, i + r, n, lab[scanned], dmin[scanned]);                   \
                scanned++;                                                                     \
                continue;                                                                      \
            }                                                                                  \
            int64_t at;                                                                        \
            T least;                                                                           \
            const int64_t n = listed_support_##SUFFIX(s, l, i + r, s->labels[i + r], own[r],   \
                                                      reach[r], cp, cand, &at, &least,         \
                                                      &s->stats[7]);                           \
            s->stats[6] += 1;                                                                  \
            soft_row_##SUFFIX(s, i + r, n, at, least);                                         \
        }                                                                                      \
    }                                                                                          \
                                                                                               \
    void soft_block_##SUFFIX(const T *X, int64_t m, int64_t d, const T *x_sq, const T *CT,     \
                             const T *c_sq, int64_t kp, const T *D, int64_t ldd, const T *w,   \
                             int64_t k, T sigma, int64_t twins,                                \
                             int64_t *labels, T *min_dist, double *num, double *den,           \
                             double *spread, double *stats, T *scratch, int64_t *cols,         \
                             unsigned char *mark, const T *nb, const int32_t *order,           \
                             const T *gap, int64_t width, T error) {                           \
        T *part = scratch, *z = scratch + ROWS * kp;                                           \
        const SoftPass_##SUFFIX s = {X, x_sq, w, d, k, kp, twins, sigma, labels,               \
                                     min_dist, num, den, spread, stats, z, z + kp,             \
                                     z + 2 * kp, z + 3 * kp, cols, mark};                      \
        const RowLists_##SUFFIX lists = {nb, gap, order, width, error};                        \
        for (int64_t i = 0; i < m; i += ROWS) {                                                \
            const int rows = m - i < ROWS ? (int)(m - i) : ROWS;                               \
            if (!D) {                                                                          \
                soft_group_##SUFFIX(&s, nb ? &lists : NULL, CT, c_sq, i, rows, part,           \
                                    z + 4 * kp, cols + kp);                                    \
                continue;                                                                      \
            }                                                                                  \
            for (int r = 0; r < rows; r++) {                                                   \
                const T *p = D + (i + r) * ldd;                                                \
                T dmin;                                                                        \
                const int64_t lab = nearest_row_##SUFFIX(p, kp, &dmin, NULL);                  \
                soft_row_##SUFFIX(&s, i + r, soft_support_##SUFFIX(&s, p, dmin), lab, dmin);   \
            }                                                                                  \
        }                                                                                      \
    }

SOFT_PASS(float, vfloat, 8, f32)
SOFT_PASS(double, vdouble, 4, f64)

/* One block of a batch of Hartigan moves (rbfkm_engine/swaps.py, hartigan_targets): row i
 * of cluster l (mass M_l, its squared distance D_l) moves to the cluster j != l that
 * minimises M_j / (M_j + w_i) D_j where that is below keep M_l / (M_l - w_i) D_l, unless
 * it is its cluster's last weight or weighs nothing. D = max(0, partial + x_sq), from
 * direct partials (CT) or the block's GEMM (D, ldd), as lloyd_block's; mass (kp, padding
 * of any positive value). labels (m) are moved in place; returns how many moved. The
 * dense torch version makes several (m, k) temporaries; this is one sweep of each row.
 * With neighbour lists at the means (nb, order, gap, width as centre_neighbours makes
 * them; direct partials only; least > 0, the least mass) a row takes its candidates from
 * its cluster's list where that shows no other can score lower (listed_join), the same
 * decision as the sweep of every mean; counts (or NULL) gets the rows the lists decided and
 * the candidates they computed. Scratch: hartigan_scratch(kp) values of T. */
#define HARTIGAN_BATCH(T, V, I, LANES, SUFFIX)                                                 \
    /* Lanes idx of a row's join scores factor_j D_j, D = max(0, partial + x_sq), the own      \
     * cluster's lane at +inf, kept lane by lane (factor: from `factor` where given, else      \
     * M_j / (M_j + wi) from `mass`; col: the lanes' first column). */                         \
    static inline void keep_join_##SUFFIX(V partial, T x_sq, T wi, const T *restrict mass,     \
                                          const T *restrict factor, int64_t col,               \
                                          V##_index own_lane, V##_index idx, V *best,          \
                                          V##_index *at) {                                     \
        V f, zero = {0};                                                                       \
        memcpy(&f, (factor ? factor : mass) + col, sizeof f);                                  \
        if (!factor) f = f / (f + wi);                                                         \
        V dist = partial + x_sq;                                                               \
        dist = select_##SUFFIX(dist < zero, zero, dist);                                       \
        keep_min_##SUFFIX(select_##SUFFIX(idx == own_lane, zero + (T)INFINITY, dist * f), idx, \
                          best, at);                                                           \
    }                                                                                          \
                                                                                               \
    /* The cluster j != lab minimising factor_j D_j (factor: M_j / (M_j + wi), given or        \
     * made from mass), and that value in *join; D_lab in *own. */                             \
    static int64_t hartigan_join_##SUFFIX(const T *restrict p, int64_t kp, T x_sq, T wi,       \
                                          const T *restrict mass, const T *restrict factor,    \
                                          int64_t lab, T *join, T *own) {                      \
        V best;                                                                                \
        V##_index at, idx = iota_##SUFFIX();                                                   \
        const V##_index own_lane = (V##_index){0} + (I)lab;                                    \
        start_##SUFFIX(&best, &at);                                                            \
        for (int64_t j = 0; j < kp; j += LANES) {                                              \
            V partial;                                                                         \
            memcpy(&partial, p + j, sizeof partial);                                           \
            keep_join_##SUFFIX(partial, x_sq, wi, mass, factor, j, own_lane, idx, &best, &at); \
            idx += (I)LANES;                                                                   \
        }                                                                                      \
        const T d_own = p[lab] + x_sq;                                                         \
        *own = d_own < (T)0 ? (T)0 : d_own;                                                    \
        return reduce_##SUFFIX(best, at, join);                                                \
    }                                                                                          \
                                                                                               \
    /* hartigan_join of the ROWS rows xs at once (squared norms xsq, weights wi, clusters      \
     * lab), from their direct partials while those are in registers: the same values, none    \
     * stored and read back. */                                                                \
    static void hartigan_joins_##SUFFIX(const T *const xs[ROWS], int64_t d, const T *CT,       \
                                        const T *c_sq, int64_t kp, const T xsq[ROWS],          \
                                        const T wi[ROWS], const T *mass, const T *factor,      \
                                        const int64_t lab[ROWS], int64_t to[ROWS],             \
                                        T join[ROWS], T own[ROWS]) {                           \
        V acc[ROWS][GROUPS], best[ROWS];                                                       \
        V##_index at[ROWS], idx = iota_##SUFFIX();                                             \
        UNROLL for (int r = 0; r < ROWS; r++) start_##SUFFIX(&best[r], &at[r]);                \
        for (int64_t j = 0; j < kp;) {                                                         \
            const int G = partials_from_##SUFFIX(xs, d, CT, c_sq, kp, j, acc);                 \
            UNROLL for (int g = 0; g < G; g++, idx += (I)LANES) {                              \
                const int64_t col = j + g * LANES;                                             \
                UNROLL for (int r = 0; r < ROWS; r++) {                                        \
                    const V##_index own_lane = (V##_index){0} + (I)lab[r];                     \
                    keep_join_##SUFFIX(acc[r][g], xsq[r], wi[r], mass, factor, col, own_lane,  \
                                       idx, &best[r], &at[r]);                                 \
                    if (lab[r] >= col && lab[r] < col + LANES) {                               \
                        const T d_own = acc[r][g][lab[r] - col] + xsq[r];                      \
                        own[r] = d_own < (T)0 ? (T)0 : d_own;                                  \
                    }                                                                          \
                }                                                                              \
            }                                                                                  \
            j += G * LANES;                                                                    \
        }                                                                                      \
        UNROLL for (int r = 0; r < ROWS; r++)                                                  \
            to[r] = reduce_##SUFFIX(best[r], at[r], &join[r]);                                 \
    }                                                                                          \
                                                                                               \
    /* What row i of cluster l (mass M_l, its squared distance D_l, its weight wi) would       \
     * save by leaving it, M_l / (M_l - wi) D_l, the remaining mass floored at 1e-30. */       \
    static inline T leave_##SUFFIX(T dist, T mass_l, T wi) {                                   \
        const T rest = mass_l - wi;                                                            \
        return dist * mass_l / (rest > (T)1e-30 ? rest : (T)1e-30);                            \
    }                                                                                          \
                                                                                               \
    /* hartigan_join of row x (cluster lab, own its partial to lab's mean) from lab's list,    \
     * where the list shows no cluster beyond the centres scanned scores below                 \
     * min(best, limit) (a move needs a score below limit): a cluster at gap g from lab's      \
     * mean is at least g - u from x (u bounds ||x - mean_lab||), so its score is at least     \
     * factor_min ((g - u)^2 - E), factor_min = least / (least + wi) (least: the least         \
     * mass of a cluster, above 0; l: the lists at the means). The candidates'                 \
     * partials are a full scan's (neighbour_scan's), their scores and the lowest index of     \
     * the least are hartigan_join's. Returns the cluster the row moves to (*join its          \
     * score), lab where it stays, or -1 where the list ends first. *scanned: the              \
     * candidates computed. */                                                                 \
    static int64_t listed_join_##SUFFIX(const T *restrict x, int64_t d, T x_sq, T wi,          \
                                        const T *restrict mass, const T *restrict factor,      \
                                        int64_t lab, T own, T limit,                           \
                                        const RowLists_##SUFFIX *l, T least, T *join,          \
                                        int64_t *scanned) {                                    \
        const int64_t width = l->width;                                                        \
        const T *list = l->nb + lab * (d + 1) * width, *g = l->gap + lab * width;              \
        const int32_t *order = l->order + lab * width;                                         \
        const T u = distance_above_##SUFFIX(own + x_sq, l->error);                             \
        const T fmin = (least / (least + wi)) * (1 - 4 * EPS_OF(T));                           \
        T best = (T)INFINITY;                                                                  \
        int64_t at = -1;                                                                       \
        for (int64_t r0 = 0; r0 <= width; r0 += LANES) {                                       \
            const T reach = gap_below_##SUFFIX(r0 < width ? g[r0] : g[width - 1], d) - u;      \
            const T floor = reach > 0 ? fmin * (reach * reach - l->error) : (T)0;              \
            const T bar = best < limit ? best : limit;                                         \
            if (floor > bar) return best < limit ? (*join = best, at) : lab;                   \
            if (r0 == width) return -1;                                                        \
            const V v = list_partials_##SUFFIX(x, d, list, width, r0);                         \
            *scanned += LANES;                                                                 \
            for (int64_t r = r0; r < r0 + LANES; r++) {                                        \
                const int64_t j = order[r];                                                    \
                if (j < 0) continue;                                                           \
                T dj = v[r - r0] + x_sq;                                                       \
                dj = dj < (T)0 ? (T)0 : dj;                                                    \
                const T f = factor ? factor[j] : mass[j] / (mass[j] + wi);                     \
                keep_least_##SUFFIX(dj * f, j, &best, &at);                                    \
            }                                                                                  \
        }                                                                                      \
        return -1;                                                                             \
    }                                                                                          \
                                                                                               \
    int64_t hartigan_batch_##SUFFIX(const T *X, int64_t m, int64_t d, const T *x_sq,           \
                                    const T *CT, const T *c_sq, int64_t kp, const T *D,        \
                                    int64_t ldd, const T *w, const T *mass, T keep,            \
                                    int64_t *labels, T *scratch, const T *nb,                  \
                                    const int32_t *order, const T *gap, int64_t width,         \
                                    T error, T least, int64_t *counts) {                       \
        T *factor = NULL;                                                                      \
        if (!w) { /* every weight 1: the factors once for the block */                         \
            factor = scratch;                                                                  \
            for (int64_t j = 0; j < kp; j++) factor[j] = mass[j] / (mass[j] + (T)1);           \
        }                                                                                      \
        const RowLists_##SUFFIX lists = {nb, gap, order, width, error};                        \
        int64_t moved = 0, listed = 0, scanned = 0;                                            \
        for (int64_t i = 0; i < m; i += ROWS) {                                                \
            const int rows = m - i < ROWS ? (int)(m - i) : ROWS;                               \
            int64_t lab[ROWS], to[ROWS];                                                       \
            T xsq[ROWS], wi[ROWS], join[ROWS], own[ROWS];                                      \
            int decided[ROWS] = {0}; /* by the lists, moved or not */                          \
            UNROLL for (int r = 0; r < ROWS; r++) {                                            \
                /* the last group padded with its last row */                                  \
                const int64_t row = i + (r < rows ? r : rows - 1);                             \
                lab[r] = labels[row];                                                          \
                xsq[r] = x_sq[row];                                                            \
                wi[r] = w ? w[row] : (T)1;                                                     \
            }                                                                                  \
            int scans = rows;                                                                  \
            if (nb && !D) { /* rows whose lists decide them; the others scan every mean */     \
                scans = 0;                                                                     \
                for (int r = 0; r < rows; r++) {                                               \
                    const T *x = X + (i + r) * d;                                              \
                    own[r] = partial_to_##SUFFIX(x, d, CT, c_sq, kp, lab[r]);                  \
                    T d_own = own[r] + xsq[r];                                                 \
                    d_own = d_own < (T)0 ? (T)0 : d_own;                                       \
                    const T limit = keep * leave_##SUFFIX(d_own, mass[lab[r]], wi[r]);         \
                    to[r] = mass[lab[r]] - wi[r] > (T)0 && wi[r] > (T)0                        \
                                ? listed_join_##SUFFIX(x, d, xsq[r], wi[r], mass, factor,      \
                                                       lab[r], own[r], limit, &lists, least,   \
                                                       &join[r], &scanned)                     \
                                : lab[r];                                                      \
                    if (to[r] < 0) {                                                           \
                        scans++;                                                               \
                        continue;                                                              \
                    }                                                                          \
                    listed++;                                                                  \
                    decided[r] = 1;                                                            \
                    if (to[r] != lab[r]) {                                                     \
                        labels[i + r] = to[r];                                                 \
                        moved++;                                                               \
                    }                                                                          \
                }                                                                              \
                if (!scans) continue;                                                          \
            }                                                                                  \
            if (!D) {                                                                          \
                const T *xs[ROWS];                                                             \
                row_group_##SUFFIX(X, d, i, rows, xs);                                         \
                hartigan_joins_##SUFFIX(xs, d, CT, c_sq, kp, xsq, wi, mass, factor, lab, to,   \
                                        join, own);                                            \
            } else {                                                                           \
                for (int r = 0; r < rows; r++)                                                 \
                    to[r] = hartigan_join_##SUFFIX(D + (i + r) * ldd, kp, xsq[r], wi[r], mass, \
                                                   factor, lab[r], &join[r], &own[r]);         \
            }                                                                                  \
            for (int r = 0; r < rows; r++) {                                                   \
                if (decided[r]) continue;                                                      \
                if (!(mass[lab[r]] - wi[r] > (T)0) || !(wi[r] > (T)0)) continue;               \
                if (join[r] < keep * leave_##SUFFIX(own[r], mass[lab[r]], wi[r])) {            \
                    labels[i + r] = to[r];                                                     \
                    moved++;                                                                   \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
        if (counts) {                                                                          \
            counts[0] = listed;                                                                \
            counts[1] = scanned;                                                               \
        }                                                                                      \
        return moved;                                                                          \
    }

HARTIGAN_BATCH(float, vfloat, int32_t, 8, f32)
HARTIGAN_BATCH(double, vdouble, int64_t, 4, f64)

/* The number of columns the kernels read at a time: kp and ldd are multiples of it. */
int64_t lloyd_lanes(void) { return 8; }

/* The values of scratch soft_block needs for kp columns: a partial-distance block, then a
 * row's scores, responsibilities, sort space and partials, and a listed row's candidates'
 * partials. */
int64_t soft_scratch(int64_t kp) { return (ROWS + 5) * kp; }

/* The values of scratch hartigan_batch needs for kp columns: the columns' factors. */
int64_t hartigan_scratch(int64_t kp) { return kp; }
