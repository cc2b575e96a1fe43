/* One block of a Lloyd pass, fused: each row's nearest centre, its squared distance and its
 * share of the M-step sums, in one loop over the rows (see rbfkm_engine/native.py).
 *
 * A row's partial distances are p_j = ||c_j||^2 - 2 x.c_j (the squared distance less the
 * row's constant ||x||^2, the same expansion as the torch passes), either computed here
 * ("direct": centres transposed, kp columns, for few features) or read from a block the
 * caller filled by a GEMM. The nearest centre is the lowest index of the minimum (as
 * torch.argmin), kept per SIMD lane and reduced at the end, so no row is scanned twice.
 *
 * Modes: 0 adds every row to the sums of its new cluster; 1 moves the rows whose label
 * changed between the sums (the caller keeps sums between passes); 2 labels only.
 * Sums are float64 whatever the data's type. lloyd_bounded is the same pass with Hamerly's
 * bounds (rbfkm_engine/bounds.py); row_minima and entmax15_rows serve the soft passes.
 * No allocation, no global state: blocks run on the caller's threads at once.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define LLOYD_KERNELS(T, V, I, LANES, SUFFIX)                                                  \
    typedef T V __attribute__((vector_size(sizeof(T) * LANES)));                               \
    typedef I V##_index __attribute__((vector_size(sizeof(T) * LANES)));                       \
                                                                                               \
    /* Lowest index of the minimum over the lanes' bests (ties: lowest index). */              \
    static inline int64_t reduce_##SUFFIX(V best, V##_index at, T *out) {                      \
        T m = best[0];                                                                         \
        I a = at[0];                                                                           \
        for (int l = 1; l < LANES; l++)                                                        \
            if (best[l] < m || (best[l] == m && at[l] < a)) {                                  \
                m = best[l];                                                                   \
                a = at[l];                                                                     \
            }                                                                                  \
        *out = m;                                                                              \
        return (int64_t)a;                                                                     \
    }                                                                                          \
                                                                                               \
    /* Lane by lane, a where mask is set, else b. */                                          \
    static inline V select_##SUFFIX(V##_index mask, V a, V b) {                                \
        return (V)(((V##_index)a & mask) | ((V##_index)b & ~mask));                            \
    }                                                                                          \
                                                                                               \
    /* Partial distances c_sq[j] - 2 x.c_j of LANES centres from column j of CT (d x kp). */  \
    static inline V partial_##SUFFIX(const T *restrict x, int64_t d, const T *restrict CT,     \
                                     const T *restrict c_sq, int64_t kp, int64_t j) {          \
        V acc, ct;                                                                             \
        memcpy(&acc, c_sq + j, sizeof acc);                                                    \
        for (int64_t t = 0; t < d; t++) {                                                      \
            memcpy(&ct, CT + t * kp + j, sizeof ct);                                           \
            acc += ((T)-2 * x[t]) * ct;                                                        \
        }                                                                                      \
        return acc;                                                                            \
    }                                                                                          \
                                                                                               \
    /* Keep, lane by lane, the smaller of best and p (the earlier column on ties). */          \
    static inline void keep_min_##SUFFIX(V p, V##_index idx, V *best, V##_index *at) {         \
        V##_index lower = p < *best;                                                           \
        *best = select_##SUFFIX(lower, p, *best);                                              \
        *at = (idx & lower) | (*at & ~lower);                                                  \
    }                                                                                          \
                                                                                               \
    static inline void start_##SUFFIX(V *best, V##_index *at, V##_index *idx) {                \
        for (int l = 0; l < LANES; l++) {                                                      \
            (*best)[l] = INFINITY;                                                             \
            (*at)[l] = 0;                                                                      \
            (*idx)[l] = (I)l;                                                                  \
        }                                                                                      \
    }                                                                                          \
                                                                                               \
    /* Add a row of weight wi to cluster `to`'s float64 sums and, from >= 0, take it from     \
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
    /* Nearest of x among the centres CT (d x kp, transposed; padding: c_sq = +inf). */        \
    static inline int64_t nearest_direct_##SUFFIX(const T *restrict x, int64_t d,              \
                                                  const T *restrict CT,                        \
                                                  const T *restrict c_sq, int64_t kp, T *out) { \
        V best;                                                                                \
        V##_index at, idx;                                                                     \
        start_##SUFFIX(&best, &at, &idx);                                                      \
        for (int64_t j = 0; j < kp; j += LANES) {                                              \
            keep_min_##SUFFIX(partial_##SUFFIX(x, d, CT, c_sq, kp, j), idx, &best, &at);       \
            idx += (I)LANES;                                                                   \
        }                                                                                      \
        return reduce_##SUFFIX(best, at, out);                                                 \
    }                                                                                          \
                                                                                               \
    /* The nearest and second-nearest of x among the centres CT, as nearest_direct: the     \
     * nearest's index, *out its partial distance, *second the next smallest (a tie of the    \
     * nearest counts: two centres at the same distance are both "nearest"). */             \
    static inline int64_t nearest_two_direct_##SUFFIX(const T *restrict x, int64_t d,          \
                                                      const T *restrict CT,                    \
                                                      const T *restrict c_sq, int64_t kp,      \
                                                      T *out, T *second) {                     \
        V best, next;                                                                          \
        V##_index at, idx;                                                                     \
        start_##SUFFIX(&best, &at, &idx);                                                      \
        next = best;                                                                           \
        for (int64_t j = 0; j < kp; j += LANES) {                                              \
            const V acc = partial_##SUFFIX(x, d, CT, c_sq, kp, j);                             \
            /* next = min(next, max(acc, best)): the lane's second smallest so far */          \
            const V bigger = select_##SUFFIX(acc < best, best, acc);                           \
            next = select_##SUFFIX(bigger < next, bigger, next);                               \
            keep_min_##SUFFIX(acc, idx, &best, &at);                                           \
            idx += (I)LANES;                                                                   \
        }                                                                                      \
        const int64_t a = reduce_##SUFFIX(best, at, out);                                      \
        T s = INFINITY;                                                                        \
        for (int l = 0; l < LANES; l++) {                                                      \
            s = next[l] < s ? next[l] : s;                                                     \
            if (at[l] != (I)a) s = best[l] < s ? best[l] : s;                                  \
        }                                                                                      \
        *second = s;                                                                           \
        return a;                                                                              \
    }                                                                                          \
                                                                                               \
    /* Nearest in one row of partial distances (kp columns, padding +inf). */                  \
    static inline int64_t nearest_row_##SUFFIX(const T *restrict row, int64_t kp, T *out) {    \
        V best, p;                                                                             \
        V##_index at, idx;                                                                     \
        start_##SUFFIX(&best, &at, &idx);                                                      \
        for (int64_t j = 0; j < kp; j += LANES) {                                              \
            memcpy(&p, row + j, sizeof p);                                                     \
            keep_min_##SUFFIX(p, idx, &best, &at);                                             \
            idx += (I)LANES;                                                                   \
        }                                                                                      \
        return reduce_##SUFFIX(best, at, out);                                                 \
    }                                                                                          \
                                                                                               \
    /* The block: X (m x d), x_sq (m), centres as CT/c_sq (direct) or D (m x ldd, ldd and     \
     * kp multiples of LANES); w (m) or NULL; labels (m, in: last pass's, out: new);           \
     * min_dist (m, out); num (k x d), den (k): float64 sums, added to. Returns the rows      \
     * whose label changed; *inertia gets sum_i w_i min_dist_i. */                             \
    int64_t lloyd_block_##SUFFIX(const T *restrict X, int64_t m, int64_t d,                    \
                                 const T *restrict x_sq, const T *restrict CT,                 \
                                 const T *restrict c_sq, int64_t kp, const T *restrict D,      \
                                 int64_t ldd, const T *restrict w, int64_t *restrict labels,   \
                                 T *restrict min_dist, double *restrict num,                   \
                                 double *restrict den, int mode, double *inertia) {            \
        int64_t moved = 0;                                                                     \
        double total = 0.0;                                                                    \
        for (int64_t i = 0; i < m; i++) {                                                      \
            const T *xi = X + i * d;                                                           \
            T p;                                                                               \
            const int64_t old = labels[i];                                                     \
            const int64_t lab = D ? nearest_row_##SUFFIX(D + i * ldd, kp, &p)                  \
                                  : nearest_direct_##SUFFIX(xi, d, CT, c_sq, kp, &p);          \
            T dist = p + x_sq[i];                                                              \
            dist = dist < (T)0 ? (T)0 : dist;                                                  \
            min_dist[i] = dist;                                                                \
            const double wi = w ? (double)w[i] : 1.0;                                          \
            total += wi * (double)dist;                                                        \
            labels[i] = lab;                                                                   \
            if (lab != old) moved++;                                                           \
            if (mode == 0)                                                                     \
                add_row_##SUFFIX(num, den, xi, d, wi, lab, -1);                                \
            else if (mode == 1 && lab != old)                                                  \
                add_row_##SUFFIX(num, den, xi, d, wi, lab, old);                               \
        }                                                                                      \
        *inertia = total;                                                                      \
        return moved;                                                                          \
    }                                                                                          \
                                                                                               \
    /* A Lloyd pass over a block with Hamerly's bounds (direct distances only). upper: a     \
     * bound on the distance (not squared) to the row's centre plus the margin; lower: on    \
     * the distance to any other. start != 0: every row labelled and its bounds set, every   \
     * row added to the sums. start == 0: the bounds moved by the centres' drift (own: how   \
     * far each centre moved; others: the farthest any other did; half_gap: half the        \
     * distance to the nearest other centre, less the margin), and only the rows whose      \
     * bounds fail are labelled again (their min_dist set) and, if their label changed,      \
     * moved between the sums. Returns the rows labelled again. */                          \
    int64_t lloyd_bounded_##SUFFIX(const T *restrict X, int64_t m, int64_t d,                  \
                                   const T *restrict x_sq, const T *restrict CT,               \
                                   const T *restrict c_sq, int64_t kp, const T *restrict w,    \
                                   int64_t *restrict labels, T *restrict min_dist,             \
                                   T *restrict upper, T *restrict lower,                       \
                                   const T *restrict own, const T *restrict others,            \
                                   const T *restrict half_gap, T margin,                       \
                                   double *restrict num, double *restrict den, int start) {    \
        int64_t relabelled = 0;                                                                \
        for (int64_t i = 0; i < m; i++) {                                                      \
            const T *xi = X + i * d;                                                           \
            const int64_t old = labels[i];                                                     \
            if (!start) {                                                                      \
                T u = upper[i] + own[old];                                                     \
                const T l = lower[i] - others[old];                                            \
                const T limit = l > half_gap[old] ? l : half_gap[old];                         \
                lower[i] = l;                                                                  \
                if (u > limit) { /* tighten: the exact distance to its own centre */           \
                    T s = 0;                                                                   \
                    for (int64_t t = 0; t < d; t++) {                                          \
                        const T diff = xi[t] - CT[t * kp + old];                               \
                        s += diff * diff;                                                      \
                    }                                                                          \
                    u = (T)sqrt((double)s) + margin;                                           \
                }                                                                              \
                upper[i] = u;                                                                  \
                if (u <= limit) continue;                                                      \
            }                                                                                  \
            relabelled++;                                                                      \
            T p, p2;                                                                           \
            const int64_t lab = nearest_two_direct_##SUFFIX(xi, d, CT, c_sq, kp, &p, &p2);     \
            T dist = p + x_sq[i], dist2 = p2 + x_sq[i];                                        \
            dist = dist < (T)0 ? (T)0 : dist;                                                  \
            dist2 = dist2 < (T)0 ? (T)0 : dist2;                                               \
            min_dist[i] = dist;                                                                \
            upper[i] = (T)sqrt((double)dist) + 2 * margin;                                     \
            lower[i] = (T)sqrt((double)dist2) - margin;                                        \
            labels[i] = lab;                                                                   \
            const double wi = w ? (double)w[i] : 1.0;                                          \
            if (start)                                                                         \
                add_row_##SUFFIX(num, den, xi, d, wi, lab, -1);                                \
            else if (lab != old)                                                               \
                add_row_##SUFFIX(num, den, xi, d, wi, lab, old);                               \
        }                                                                                      \
        return relabelled;                                                                     \
    }                                                                                          \
                                                                                               \
    /* Row minima of a block of partial distances D (m x k, rows ldd apart, any k): d_min,    \
     * the nearest column (lowest index), min_dist = max(d_min + x_sq, 0) and, where counts   \
     * is not NULL, the columns below d_min + threshold. Returns the rows with more than one \
     * such column (0 without counts). */                                                     \
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
            if (body) lab = nearest_row_##SUFFIX(row, body, &p);                               \
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
 * annealing pass needs: q = [z/2 - max/2 - tau]_+^2 with tau the exact sort-based threshold
 * (the `entmax` package's algorithm), -sigma sum_j q_j z_j (the distance the row spends
 * above its nearest), (4/3)(1 - sum_j q_j^1.5) (Tsallis entropy) and the support's size.
 * Only scores with x = (z - max)/2 > -1 can be in the support (tau >= -1), so only those
 * are sorted, into `work` (width values). */
#define INSERTION_SORT_MAX 48

#define ENTMAX15_ROWS(T, SUFFIX)                                                               \
    static int descending_##SUFFIX(const void *a, const void *b) {                             \
        const T x = *(const T *)a, y = *(const T *)b;                                          \
        return (x < y) - (x > y);                                                              \
    }                                                                                          \
                                                                                               \
    static void sort_descending_##SUFFIX(T *v, int64_t n) {                                    \
        for (int64_t i = 1; i < n; i++) {                                                      \
            const T x = v[i];                                                                  \
            int64_t j = i - 1;                                                                 \
            while (j >= 0 && v[j] < x) {                                                       \
                v[j + 1] = v[j];                                                               \
                j--;                                                                           \
            }                                                                                  \
            v[j + 1] = x;                                                                      \
        }                                                                                      \
    }                                                                                          \
                                                                                               \
    void entmax15_rows_##SUFFIX(const T *z, int64_t r, int64_t width, int64_t ldz, T sigma,    \
                                T *q, int64_t ldq, T *restrict spent,                          \
                                T *restrict tsallis, int32_t *restrict support,                \
                                T *restrict work) {                                            \
        for (int64_t i = 0; i < r; i++) {                                                      \
            const T *zi = z + i * ldz;                                                         \
            T *qi = q + i * ldq;                                                               \
            T top = zi[0];                                                                     \
            for (int64_t j = 1; j < width; j++) top = zi[j] > top ? zi[j] : top;               \
            int64_t n = 0;                                                                     \
            for (int64_t j = 0; j < width; j++) {                                              \
                const T x = (zi[j] - top) / 2;                                                 \
                if (x > (T)-1) work[n++] = x;                                                  \
            }                                                                                  \
            if (n <= INSERTION_SORT_MAX)                                                       \
                sort_descending_##SUFFIX(work, n);                                             \
            else                                                                               \
                qsort(work, (size_t)n, sizeof(T), descending_##SUFFIX);                        \
            double sum = 0.0, sum_sq = 0.0;                                                    \
            T tau_star = work[0] - (T)1;                                                       \
            for (int64_t k = 0; k < n; k++) {                                                  \
                const double rho = (double)(k + 1);                                            \
                sum += work[k];                                                                \
                sum_sq += (double)work[k] * work[k];                                           \
                const double mean = sum / rho, mean_sq = sum_sq / rho;                         \
                const double delta = (1.0 - rho * (mean_sq - mean * mean)) / rho;              \
                const T tau = (T)(mean - sqrt(delta > 0.0 ? delta : 0.0));                     \
                if (tau > work[k]) break;                                                      \
                tau_star = tau;                                                                \
            }                                                                                  \
            double spent_i = 0.0, power = 0.0;                                                 \
            int32_t nonzero = 0;                                                               \
            for (int64_t j = 0; j < width; j++) {                                              \
                const T zj = zi[j]; /* q may be z itself: read before writing */               \
                T v = (zj - top) / 2 - tau_star;                                               \
                v = v > (T)0 ? v * v : (T)0;                                                   \
                qi[j] = v;                                                                     \
                if (v > (T)0) {                                                                \
                    nonzero++;                                                                 \
                    spent_i += (double)v * zj;                                                 \
                    power += (double)v * sqrt((double)v);                                      \
                }                                                                              \
            }                                                                                  \
            spent[i] = (T)(-(double)sigma * spent_i);                                          \
            tsallis[i] = (T)((4.0 / 3.0) * (1.0 - power));                                     \
            support[i] = nonzero;                                                              \
        }                                                                                      \
    }

ENTMAX15_ROWS(float, f32)
ENTMAX15_ROWS(double, f64)

LLOYD_KERNELS(float, vfloat, int32_t, 8, f32)
LLOYD_KERNELS(double, vdouble, int64_t, 4, f64)

/* The number of columns the kernels read at a time: kp and ldd are multiples of it. */
int64_t lloyd_lanes(void) { return 8; }
