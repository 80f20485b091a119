// C shim over hnswlib (Debian bookworm ships 0.6.2): an incrementally grown
// HierarchicalNSW<float> over vectors stored f32 or f16 with inner-product
// distance, plus a filtered bottom-layer search (0.6.2 has no filter argument
// of its own).
//
// Distances are the caller's kernels (src/kernels, AVX2 chosen at run time
// like the rest of subq): hnswlib's own SIMD distances are chosen at compile
// time (SSE only in a portable build) and know f32 only. hnswlib's prefetches
// (USE_SSE) stay on for graph construction; they read one link past the end
// of a full upper-layer list, which AddressSanitizer reports, so this file is
// built without it (CMakeLists.txt). The search below is our own: each
// expanded node's unvisited neighbours are gathered, their vectors
// prefetched, and scored by one gathered dot call. Inserts of level-0
// elements (all but about 1/M) use it too, then hnswlib's relinking
// (hnsw_shim::add_level0); the others go through hnswlib's addPoint. Both
// rely on 0.6.2's public members.
#include <hnswlib/hnswlib.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <queue>
#include <stdexcept>
#include <utility>
#include <vector>

#include "base/bigmem.h"
#include "select/hnsw_shim.h"
#include "select/shim_error.h"

extern "C" float fp16_to_fp32(uint16_t h); // quant/quant.h (C11 only)

namespace {

struct DotParam {
    int dim;
    hnsw_dot_fn dot;
};

// distance = 1 - a.b
float ip_dist(const void *a, const void *b, const void *param) {
    const DotParam *p = static_cast<const DotParam *>(param);
    return 1.0f - p->dot(a, b, p->dim);
}

class IpSpace : public hnswlib::SpaceInterface<float> {
    DotParam param_;
    size_t bytes_;

  public:
    // vectors of dim elements, distances over their first graph_dim
    IpSpace(int dim, int graph_dim, int elem_bytes, hnsw_dot_fn dot)
        : param_{graph_dim, dot}, bytes_((size_t)dim * elem_bytes) {}
    size_t get_data_size() override { return bytes_; }
    hnswlib::DISTFUNC<float> get_dist_func() override { return ip_dist; }
    void *get_dist_func_param() override { return &param_; }
};

typedef hnswlib::HierarchicalNSW<float> Hnsw;

// Vectors and level-0 links on 2 MiB pages where the kernel gives them: a
// search visits rows anywhere in them, and with 4 KiB pages each visit
// also misses the TLB (the rows of the exact selector's re-rank took 3x
// longer so, select_exact.c).
void advise(Hnsw *ix) {
    bigmem_advise(ix->data_level0_memory_, ix->max_elements_ * ix->size_data_per_element_);
}

// Every cache line of bytes [p, p + len). An element is 4 + 4 M0 bytes of
// links, the vector and an 8-byte label (524 bytes for M 32 and 128 f16
// values), so most vectors start off a line and span one line more than
// their size: stepping from p by 64 would leave that line to a demand miss.
void prefetch_lines(const char *p, size_t len) {
    for (uintptr_t a = (uintptr_t)p & ~(uintptr_t)63; a < (uintptr_t)p + len; a += 64)
        __builtin_prefetch(reinterpret_cast<const void *>(a));
}

}  // namespace

struct hnsw_shim {
    typedef std::pair<float, hnswlib::tableint> Pair; // a distance and an element
    IpSpace space;                // outlives the index, which points at its parameters
    std::unique_ptr<Hnsw> index;
    hnsw_gather_fn gather;
    int graph_dim, elem_bytes;    // the elements distances use (the first of each vector); bytes of one
    size_t upper_bytes = 0;       // link lists of the upper layers
    // the next insert's level, drawn ahead by prepare() (-1: not drawn), and
    // its insert-time search, valid for that label and row at that count
    int next_level = -1;
    bool ahead = false;
    hnswlib::labeltype ahead_label = 0;
    size_t ahead_count = 0;
    std::vector<char> ahead_row;
    std::vector<Pair> ahead_top; // the heap's container
    size_t n_linked_ahead = 0;   // inserts that used a search from prepare()
    hnsw_shim(int d, int gd, int eb, hnsw_dot_fn dot, hnsw_gather_fn g)
        : space(d, gd, eb, dot), gather(g), graph_dim(gd), elem_bytes(eb) {}

    // q . x for the n ids of a link list, into ids/sims: with `visited`, only
    // those not visited yet (they are marked now); their vectors are
    // prefetched, then scored by one gathered dot. Returns the count.
    int score(const float *q, const hnswlib::tableint *nb, int n, hnswlib::vl_type *visited, hnswlib::vl_type tag,
              int32_t *ids, float *sims) const {
        const Hnsw *ix = index.get();
        int m = 0;
        for (int i = 0; i < n; i++) {
            if (visited) {
                if (visited[nb[i]] == tag) continue;
                visited[nb[i]] = tag;
            }
            ids[m++] = (int32_t)nb[i];
        }
        for (int i = 0; i < m; i++) {
            prefetch_lines(ix->getDataByInternalId((hnswlib::tableint)ids[i]), (size_t)graph_dim * elem_bytes);
        }
        gather(q, ix->data_level0_memory_ + ix->offsetData_, ix->size_data_per_element_ / (size_t)elem_bytes,
               graph_dim, ids, m, sims);
        return m;
    }

    // The level-0 link list of node `id` (count and links) into the cache.
    void prefetch_links(hnswlib::tableint id) const {
        const Hnsw *ix = index.get();
        prefetch_lines(reinterpret_cast<const char *>(ix->get_linklist0(id)), ix->size_links_level0_);
    }

    // Greedy descent through the upper layers from the entry point (as
    // HierarchicalNSW::searchKnn): the node reached and its distance.
    // Counts distances in *nd and link-list entries read in *nl.
    hnswlib::tableint descend(const float *q, float *cur_d, int32_t *ids, float *sim, int64_t *nd,
                              int64_t *nl) const {
        const Hnsw *ix = index.get();
        hnswlib::tableint cur = ix->enterpoint_node_;
        score(q, &cur, 1, nullptr, 0, ids, sim);
        *cur_d = 1.0f - sim[0];
        ++*nd;
        for (int level = ix->maxlevel_; level > 0; level--) {
            for (bool changed = true; changed;) {
                changed = false;
                unsigned *ll = ix->get_linklist(cur, level);
                int size = ix->getListCount(ll);
                int m = score(q, ll + 1, size, nullptr, 0, ids, sim);
                *nd += m;
                *nl += 1 + size;
                for (int i = 0; i < m; i++) {
                    if (1.0f - sim[i] < *cur_d) {
                        *cur_d = 1.0f - sim[i];
                        cur = (hnswlib::tableint)ids[i];
                        changed = true;
                    }
                }
            }
        }
        return cur;
    }

    // Bottom layer: best-first beam search from `cur`. `top` keeps the
    // `width` nearest accepted nodes (worst on top); `cand` is the frontier
    // (nearest on top, stored as -distance). Rejected nodes are expanded but
    // never kept, so the search walks through them to accepted regions.
    template <class Top, class Allowed>
    void beam(const float *q, hnswlib::tableint cur, float cur_d, size_t width, Allowed allowed, Top &top,
              int32_t *ids, float *sim, int64_t *nd, int64_t *nl) const {
        const Hnsw *ix = index.get();
        std::priority_queue<Pair> cand;
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
            // the next node to expand is most often the frontier's best now:
            // its link list comes in while this node's neighbours are scored
            if (!cand.empty()) prefetch_links(cand.top().second);
            unsigned *ll = ix->get_linklist0(c.second);
            int size = ix->getListCount(ll);
            int m = score(q, ll + 1, size, visited, tag, ids, sim);
            *nd += m;
            *nl += 1 + size;
            for (int i = 0; i < m; i++) {
                float d = 1.0f - sim[i];
                hnswlib::tableint id = (hnswlib::tableint)ids[i];
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
    }

    // hnswlib's candidate queue with its container in reach: prepare()
    // keeps the heap as it is, so that linking pops ties in the same order
    struct Candidates : std::priority_queue<Pair, std::vector<Pair>, Hnsw::CompareByFirst> {
        using std::priority_queue<Pair, std::vector<Pair>, Hnsw::CompareByFirst>::c;
    };

    // The level of the next element: the one prepare() drew, or a draw from
    // hnswlib's generator (as addPoint draws it), so that the stream of
    // levels stays a function of the seed and the insert order.
    int draw_level() {
        const int level = next_level >= 0 ? next_level : index->getRandomLevel(index->mult_);
        next_level = -1;
        return level;
    }

    // The insert-time search of addPoint for row x: the ef_construction
    // nearest elements, by descend() and beam() (gathered, prefetched)
    // instead of hnswlib's one pair at a time.
    void insert_search(const char *x, Candidates &top) const {
        const Hnsw *ix = index.get();
        std::vector<float> q(graph_dim);
        for (int i = 0; i < graph_dim; i++)
            q[i] = elem_bytes == 2 ? fp16_to_fp32(reinterpret_cast<const uint16_t *>(x)[i])
                                   : reinterpret_cast<const float *>(x)[i];
        std::vector<int32_t> ids(std::max(ix->maxM0_, ix->maxM_) + 1);
        std::vector<float> sim(ids.size());
        int64_t nd = 0, nl = 0;
        float cur_d;
        hnswlib::tableint cur = descend(q.data(), &cur_d, ids.data(), sim.data(), &nd, &nl);
        beam(q.data(), cur, cur_d, ix->ef_construction_, [](hnswlib::tableint) { return true; }, top, ids.data(),
             sim.data(), &nd, &nl);
    }

    // addPoint for an element of level 0 (all but about 1/M of them) given
    // its insert-time search `top`: the relinking is hnswlib's own.
    hnswlib::tableint link_level0(const char *x, hnswlib::labeltype label, Candidates &top) {
        Hnsw *ix = index.get();
        hnswlib::tableint cur_c = (hnswlib::tableint)ix->cur_element_count++;
        ix->label_lookup_[label] = cur_c;
        ix->element_levels_[cur_c] = 0;
        memset(ix->data_level0_memory_ + cur_c * ix->size_data_per_element_ + ix->offsetLevel0_, 0,
               ix->size_data_per_element_);
        memcpy(ix->getExternalLabeLp(cur_c), &label, sizeof label);
        memcpy(ix->getDataByInternalId(cur_c), x, ix->data_size_);
        ix->mutuallyConnectNewElement(x, cur_c, top, 0, false);
        return cur_c;
    }

    // Insert a level-0 element: its search from prepare() when that was
    // for this label and row on the graph as it is, else now.
    hnswlib::tableint add_level0(const char *x, hnswlib::labeltype label) {
        Candidates top;
        if (ahead && ahead_label == label && ahead_count == index->cur_element_count &&
            !memcmp(ahead_row.data(), x, index->data_size_)) {
            top.c = ahead_top;
            n_linked_ahead++;
        } else {
            insert_search(x, top);
        }
        ahead = false;
        return link_level0(x, label, top);
    }
};

extern "C" int hnsw_shim_new(int dim, int graph_dim, int elem_bytes, hnsw_dot_fn dot, hnsw_gather_fn gather, int m,
                             int ef_construction, uint64_t seed, size_t capacity, hnsw_shim **out, char *msg,
                             size_t msg_cap) {
    *out = nullptr;
    try {
        std::unique_ptr<hnsw_shim> h(new hnsw_shim(dim, graph_dim, elem_bytes, dot, gather));
        h->index.reset(new Hnsw(&h->space, std::max<size_t>(capacity, 1), (size_t)m, (size_t)ef_construction,
                                (size_t)seed));
        advise(h->index.get());
        // 0.6.2 leaves its search counters uninitialised
        h->index->metric_distance_computations = 0;
        h->index->metric_hops = 0;
        *out = h.release();
        return 0;
    } catch (...) {
        return shim_fail_current(msg, msg_cap, "out of memory for the HNSW index",
                                 "unknown C++ exception in hnswlib");
    }
}

extern "C" void hnsw_shim_free(hnsw_shim *h) {
    delete h;
}

extern "C" int hnsw_shim_add(hnsw_shim *h, const void *x, int n, int64_t label0, char *msg, size_t msg_cap) {
    try {
        Hnsw *ix = h->index.get();
        for (int t = 0; t < n; t++) {
            // grow geometrically: resizeIndex reallocates storage, the graph is kept
            if (ix->cur_element_count >= ix->max_elements_) {
                ix->resizeIndex(2 * ix->max_elements_);
                advise(ix);
            }
            const char *xt = static_cast<const char *>(x) + (size_t)t * ix->data_size_;
            // addPoint (an upper-level element, or the graph's first) draws once
            // more and uses ours when it is > 0: the stream stays a function of the seed
            const int drawn = h->draw_level();
            hnswlib::tableint id = drawn > 0 || ix->enterpoint_node_ == (hnswlib::tableint)-1
                                       ? ix->addPoint(xt, (hnswlib::labeltype)(label0 + t), drawn > 0 ? drawn : -1)
                                       : h->add_level0(xt, (hnswlib::labeltype)(label0 + t));
            int level = ix->element_levels_[id];
            if (level > 0) h->upper_bytes += ix->size_links_per_element_ * (size_t)level + 1;
        }
        return 0;
    } catch (...) {
        return shim_fail_current(msg, msg_cap, "out of memory growing the HNSW index",
                                 "unknown C++ exception in hnswlib");
    }
}

extern "C" int hnsw_shim_prepare(hnsw_shim *h, const void *x, int64_t label) {
    h->ahead = false;
    try {
        Hnsw *ix = h->index.get();
        if (h->next_level < 0) h->next_level = ix->getRandomLevel(ix->mult_);
        if (h->next_level > 0 || ix->enterpoint_node_ == (hnswlib::tableint)-1) return 0; // addPoint's own search
        hnsw_shim::Candidates top;
        h->insert_search(static_cast<const char *>(x), top);
        h->ahead_top = top.c;
        h->ahead_row.assign(static_cast<const char *>(x), static_cast<const char *>(x) + ix->data_size_);
        h->ahead_label = (hnswlib::labeltype)label;
        h->ahead_count = ix->cur_element_count;
        h->ahead = true;
        return 0;
    } catch (const std::bad_alloc &) {
        return 1;
    } catch (...) {
        return 2;
    }
}

extern "C" size_t hnsw_shim_linked_ahead(const hnsw_shim *h) {
    return h->n_linked_ahead;
}

extern "C" size_t hnsw_shim_count(const hnsw_shim *h) {
    return h->index->cur_element_count;
}

extern "C" int hnsw_shim_search(const hnsw_shim *h, const float *q, int k, int ef, select_filter_fn filter, void *ctx,
                                int64_t *labels, float *sims, int64_t *n_dist, uint64_t *n_bytes) {
    try {
        const Hnsw *ix = h->index.get();
        if (ix->cur_element_count == 0 || k <= 0) return 0;
        const size_t width = (size_t)std::max(ef, k);
        auto allowed = [&](hnswlib::tableint id) {
            return !filter || filter(ctx, (int64_t)ix->getExternalLabel(id));
        };
        std::vector<int32_t> ids(std::max(ix->maxM0_, ix->maxM_) + 1);
        std::vector<float> sim(ids.size());
        int64_t nd = 0, nl = 0; // distances, link-list entries read

        float cur_d;
        hnswlib::tableint cur = h->descend(q, &cur_d, ids.data(), sim.data(), &nd, &nl);
        std::priority_queue<std::pair<float, hnswlib::tableint>> top;
        h->beam(q, cur, cur_d, width, allowed, top, ids.data(), sim.data(), &nd, &nl);

        while (top.size() > (size_t)k) top.pop();
        int n = (int)top.size();
        for (int i = n - 1; i >= 0; i--) {  // top pops worst first
            labels[i] = (int64_t)ix->getExternalLabel(top.top().second);
            sims[i] = 1.0f - top.top().first;
            top.pop();
        }
        if (n_dist) *n_dist += nd;
        if (n_bytes)
            *n_bytes += (uint64_t)nd * h->graph_dim * h->elem_bytes + (uint64_t)nl * sizeof(hnswlib::tableint);
        return n;
    } catch (...) {
        return -1;
    }
}

extern "C" const void *hnsw_shim_vectors(const hnsw_shim *h, size_t *stride) {
    const Hnsw *ix = h->index.get();
    *stride = ix->size_data_per_element_ / (size_t)h->elem_bytes;
    return ix->data_level0_memory_ + ix->offsetData_;
}

extern "C" size_t hnsw_shim_upper_words(const hnsw_shim *h) {
    const Hnsw *ix = h->index.get();
    size_t words = 0;
    for (size_t i = 0; i < ix->cur_element_count; i++) words += (size_t)ix->element_levels_[i] * (1 + ix->maxM_);
    return words;
}

extern "C" void hnsw_shim_save_graph(const hnsw_shim *h, uint32_t *levels, uint32_t *level0, uint32_t *upper) {
    const Hnsw *ix = h->index.get();
    const size_t words0 = 1 + ix->maxM0_, words = 1 + ix->maxM_;
    for (size_t i = 0; i < ix->cur_element_count; i++) {
        const hnswlib::tableint id = (hnswlib::tableint)i;
        levels[i] = (uint32_t)ix->element_levels_[i];
        memcpy(level0 + i * words0, ix->get_linklist0(id), words0 * sizeof(uint32_t));
        for (int l = 1; l <= ix->element_levels_[i]; l++, upper += words)
            memcpy(upper, ix->get_linklist(id, l), words * sizeof(uint32_t));
    }
}

extern "C" int hnsw_shim_load_graph(hnsw_shim *h, size_t count, const uint32_t *levels, const uint32_t *level0,
                                    const uint32_t *upper, const void *(*vector)(void *ctx, size_t i), void *ctx,
                                    char *msg, size_t msg_cap) {
    try {
        Hnsw *ix = h->index.get();
        if (ix->cur_element_count != 0 || h->next_level >= 0)
            return shim_fail(msg, msg_cap, 2, "the index is not empty");
        if (count > ix->max_elements_) {
            ix->resizeIndex(count);
            advise(ix);
        }
        // the levels hnsw_shim_add's inserts would draw (draw_level, then
        // addPoint's own draw for an upper-level element or the first)
        for (size_t i = 0; i < count; i++) {
            const int drawn = ix->getRandomLevel(ix->mult_);
            int level = drawn;
            if (drawn > 0 || i == 0) {
                const int again = ix->getRandomLevel(ix->mult_);
                if (drawn == 0) level = again;
            }
            if ((uint32_t)level != levels[i])
                return shim_fail(msg, msg_cap, 2, "the graph was not built with this seed");
        }
        const size_t words0 = 1 + ix->maxM0_, words = 1 + ix->maxM_;
        for (size_t i = 0; i < count; i++) {
            const hnswlib::tableint id = (hnswlib::tableint)i;
            const int level = (int)levels[i];
            char *e = ix->data_level0_memory_ + i * ix->size_data_per_element_;
            memset(e, 0, ix->size_data_per_element_);
            memcpy(e + ix->offsetLevel0_, level0 + i * words0, words0 * sizeof(uint32_t));
            memcpy(e + ix->offsetData_, vector(ctx, i), ix->data_size_);
            const hnswlib::labeltype label = i;
            memcpy(e + ix->label_offset_, &label, sizeof label);
            ix->label_lookup_[label] = id;
            ix->element_levels_[i] = 0;
            if (level > 0) {
                char *links = static_cast<char *>(malloc(ix->size_links_per_element_ * level + 1));
                if (!links) throw std::bad_alloc();
                memset(links, 0, ix->size_links_per_element_ * level + 1);
                for (int l = 1; l <= level; l++, upper += words)
                    memcpy(links + (l - 1) * ix->size_links_per_element_, upper, words * sizeof(uint32_t));
                ix->linkLists_[i] = links;
                ix->element_levels_[i] = level;
                h->upper_bytes += ix->size_links_per_element_ * (size_t)level + 1;
            }
            ix->cur_element_count = i + 1; // the destructor frees what is linked so far
            if (level > ix->maxlevel_) { // as addPoint: the first element of a new top level enters
                ix->maxlevel_ = level;
                ix->enterpoint_node_ = id;
            }
        }
        return 0;
    } catch (...) {
        return shim_fail_current(msg, msg_cap, "out of memory loading the HNSW graph",
                                 "unknown C++ exception in hnswlib");
    }
}

extern "C" size_t hnsw_shim_bytes(const hnsw_shim *h) {
    const Hnsw *ix = h->index.get();
    size_t per_slot = ix->size_data_per_element_ + sizeof(void *) + sizeof(int) + sizeof(std::mutex) +
                      sizeof(hnswlib::vl_type);
    return sizeof *h + ix->max_elements_ * per_slot + h->upper_bytes +
           ix->cur_element_count * 4 * sizeof(size_t) /* label map, roughly */ +
           Hnsw::max_update_element_locks * sizeof(std::mutex);
}
