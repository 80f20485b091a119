// C shim over hnswlib (Debian bookworm ships 0.6.2): an incrementally grown
// HierarchicalNSW<float> over unit vectors with inner-product distance, plus a
// filtered bottom-layer search (0.6.2 has no filter argument of its own).
//
// NO_MANUAL_VECTORIZATION: hnswlib's own SSE/AVX code is chosen at compile
// time and its prefetches read one link past the end of full upper-layer
// lists (an out-of-bounds read ASan reports). We supply our own distance
// function instead: subq's f32 dot (src/kernels/dot.h), inlined, its AVX2 form
// chosen at run time like the rest of subq.
#define NO_MANUAL_VECTORIZATION
#include <hnswlib/hnswlib.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <queue>
#include <stdexcept>
#include <utility>
#include <vector>

#include "kernels/dot.h"
#include "select/hnsw_shim.h"

namespace {

// distance = 1 - a.b
float ip_dist_scalar(const void *a, const void *b, const void *param) {
    return 1.0f - kernels_dot_f32_scalar(static_cast<const float *>(a), static_cast<const float *>(b),
                                         *static_cast<const size_t *>(param));
}

KERNELS_AVX2 float ip_dist_avx2(const void *a, const void *b, const void *param) {
    return 1.0f - kernels_dot_f32_avx2(static_cast<const float *>(a), static_cast<const float *>(b),
                                       *static_cast<const size_t *>(param));
}

class UnitIpSpace : public hnswlib::SpaceInterface<float> {
    size_t dim_;
    hnswlib::DISTFUNC<float> f_;

  public:
    UnitIpSpace(size_t dim, bool avx2) : dim_(dim), f_(avx2 ? ip_dist_avx2 : ip_dist_scalar) {}
    size_t get_data_size() override { return dim_ * sizeof(float); }
    hnswlib::DISTFUNC<float> get_dist_func() override { return f_; }
    void *get_dist_func_param() override { return &dim_; }
};

typedef hnswlib::HierarchicalNSW<float> Hnsw;

int fail(char *msg, size_t cap, int code, const char *what) {
    if (msg && cap) {
        std::strncpy(msg, what, cap - 1);
        msg[cap - 1] = 0;
    }
    return code;
}

}  // namespace

struct hnsw_shim {
    UnitIpSpace space;            // outlives the index, which points at its dim
    std::unique_ptr<Hnsw> index;
    size_t upper_bytes = 0;       // link lists of the upper layers
    hnsw_shim(size_t dim, bool avx2) : space(dim, avx2) {}
};

extern "C" int hnsw_shim_new(int dim, int m, int ef_construction, uint64_t seed, size_t capacity, int use_avx2,
                             hnsw_shim **out, char *msg, size_t msg_cap) {
    *out = nullptr;
    try {
        std::unique_ptr<hnsw_shim> h(new hnsw_shim((size_t)dim, use_avx2 != 0));
        h->index.reset(new Hnsw(&h->space, std::max<size_t>(capacity, 1), (size_t)m, (size_t)ef_construction,
                                (size_t)seed));
        // 0.6.2 leaves its search counters uninitialised
        h->index->metric_distance_computations = 0;
        h->index->metric_hops = 0;
        *out = h.release();
        return 0;
    } catch (const std::bad_alloc &) {
        return fail(msg, msg_cap, 1, "out of memory for the HNSW index");
    } catch (const std::exception &e) {
        return fail(msg, msg_cap, 2, e.what());
    } catch (...) {
        return fail(msg, msg_cap, 2, "unknown C++ exception in hnswlib");
    }
}

extern "C" void hnsw_shim_free(hnsw_shim *h) {
    delete h;
}

extern "C" int hnsw_shim_add(hnsw_shim *h, const float *x, int n, int64_t label0, char *msg, size_t msg_cap) {
    try {
        Hnsw *ix = h->index.get();
        for (int t = 0; t < n; t++) {
            // grow geometrically: resizeIndex reallocates storage, the graph is kept
            if (ix->cur_element_count >= ix->max_elements_) ix->resizeIndex(2 * ix->max_elements_);
            hnswlib::tableint id = ix->addPoint(x + (size_t)t * (ix->data_size_ / sizeof(float)),
                                                (hnswlib::labeltype)(label0 + t), -1);
            int level = ix->element_levels_[id];
            if (level > 0) h->upper_bytes += ix->size_links_per_element_ * (size_t)level + 1;
        }
        return 0;
    } catch (const std::bad_alloc &) {
        return fail(msg, msg_cap, 1, "out of memory growing the HNSW index");
    } catch (const std::exception &e) {
        return fail(msg, msg_cap, 2, e.what());
    } catch (...) {
        return fail(msg, msg_cap, 2, "unknown C++ exception in hnswlib");
    }
}

extern "C" size_t hnsw_shim_count(const hnsw_shim *h) {
    return h->index->cur_element_count;
}

extern "C" int hnsw_shim_search(const hnsw_shim *h, const float *q, int k, int ef, select_filter_fn filter, void *ctx,
                                int64_t *labels, float *sims, int64_t *n_dist) {
    try {
        const Hnsw *ix = h->index.get();
        if (ix->cur_element_count == 0 || k <= 0) return 0;
        const size_t width = (size_t)std::max(ef, k);
        auto dist = [&](hnswlib::tableint id) {
            return ix->fstdistfunc_(q, ix->getDataByInternalId(id), ix->dist_func_param_);
        };
        auto allowed = [&](hnswlib::tableint id) {
            return !filter || filter(ctx, (int64_t)ix->getExternalLabel(id));
        };
        int64_t nd = 0;

        // greedy descent through the upper layers (as HierarchicalNSW::searchKnn)
        hnswlib::tableint cur = ix->enterpoint_node_;
        float cur_d = dist(cur);
        nd++;
        for (int level = ix->maxlevel_; level > 0; level--) {
            for (bool changed = true; changed;) {
                changed = false;
                unsigned *ll = ix->get_linklist(cur, level);
                int size = ix->getListCount(ll);
                const hnswlib::tableint *nb = ll + 1;
                for (int i = 0; i < size; i++) {
                    float d = dist(nb[i]);
                    nd++;
                    if (d < cur_d) {
                        cur_d = d;
                        cur = nb[i];
                        changed = true;
                    }
                }
            }
        }

        // Bottom layer: best-first beam search. `top` keeps the `width` nearest
        // accepted nodes (worst on top); `cand` is the frontier (nearest on
        // top, stored as -distance). Rejected nodes are expanded but never
        // kept, so the search walks through them to accepted regions.
        typedef std::pair<float, hnswlib::tableint> Pair;
        std::priority_queue<Pair> top, cand;
        hnswlib::VisitedList *vl = ix->visited_list_pool_->getFreeVisitedList();
        hnswlib::vl_type *visited = vl->mass, tag = vl->curV;
        float bound = std::numeric_limits<float>::max();
        if (allowed(cur)) {
            top.emplace(cur_d, cur);
            bound = cur_d;
        }
        cand.emplace(-cur_d, cur);
        visited[cur] = tag;
        while (!cand.empty()) {
            Pair c = cand.top();
            if (-c.first > bound && top.size() == width) break;
            cand.pop();
            unsigned *ll = ix->get_linklist0(c.second);
            size_t size = ix->getListCount(ll);
            const hnswlib::tableint *nb = ll + 1;
            for (size_t i = 0; i < size; i++) {
                hnswlib::tableint id = nb[i];
                if (visited[id] == tag) continue;
                visited[id] = tag;
                float d = dist(id);
                nd++;
                if (top.size() < width || d < bound) {
                    cand.emplace(-d, id);
                    if (allowed(id)) {
                        top.emplace(d, id);
                        if (top.size() > width) top.pop();
                        bound = top.top().first;
                    }
                }
            }
        }
        ix->visited_list_pool_->releaseVisitedList(vl);

        while (top.size() > (size_t)k) top.pop();
        int n = (int)top.size();
        for (int i = n - 1; i >= 0; i--) {  // top pops worst first
            labels[i] = (int64_t)ix->getExternalLabel(top.top().second);
            sims[i] = 1.0f - top.top().first;
            top.pop();
        }
        if (n_dist) *n_dist += nd;
        return n;
    } catch (...) {
        return -1;
    }
}

extern "C" const float *hnsw_shim_vectors(const hnsw_shim *h, size_t *stride) {
    const Hnsw *ix = h->index.get();
    *stride = ix->size_data_per_element_ / sizeof(float);
    return reinterpret_cast<const float *>(ix->data_level0_memory_ + ix->offsetData_);
}

extern "C" size_t hnsw_shim_bytes(const hnsw_shim *h) {
    const Hnsw *ix = h->index.get();
    size_t per_slot = ix->size_data_per_element_ + sizeof(void *) + sizeof(int) + sizeof(std::mutex) +
                      sizeof(hnswlib::vl_type);
    return sizeof *h + ix->max_elements_ * per_slot + h->upper_bytes +
           ix->cur_element_count * 4 * sizeof(size_t) /* label map, roughly */ +
           Hnsw::max_update_element_locks * sizeof(std::mutex);
}
