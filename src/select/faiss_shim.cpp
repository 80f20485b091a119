// C shim over FAISS IndexHNSWFlat (METRIC_INNER_PRODUCT), grown point by
// point as tokens are appended. Compiled to nothing without SUBQ_HAVE_FAISS.
//
// Adds and searches go through FAISS's single-point HNSW API
// (HNSW::add_with_locks, HNSW::search) instead of IndexHNSW::add/search:
// IndexHNSW::add initialises one lock and one visited flag per stored vector
// on every call (O(n) per decoded token), and IndexHNSW::search opens an
// OpenMP parallel region per call, which on a busy machine costs
// milliseconds for a single query. Here the locks and the visited table
// persist and grow with the index.
#ifdef SUBQ_HAVE_FAISS

#include <faiss/IndexFlat.h>
#include <faiss/IndexHNSW.h>
#include <faiss/impl/HNSW.h>
#include <faiss/impl/AuxIndexStructures.h>
#include <faiss/impl/DistanceComputer.h>
#include <faiss/impl/IDSelector.h>
#include <faiss/utils/Heap.h>
#include <omp.h>

#include <cstring>
#include <exception>
#include <new>
#include <vector>

#include "kernels/dot.h"
#include "select/faiss_shim.h"
#include "select/shim_error.h"

namespace {

// IDSelector that asks the caller's C filter.
struct CFilter : faiss::IDSelector {
    select_filter_fn fn;
    void *ctx;
    CFilter(select_filter_fn f, void *c) : fn(f), ctx(c) {}
    bool is_member(idx_t id) const override { return fn(ctx, (int64_t)id) != 0; }
};

// Distance -a.b over the flat storage (HNSW minimises; FAISS negates inner
// products the same way internally). Our own kernel rather than the
// storage's computer: Debian's generic libfaiss build computes inner
// products with its scalar reference loop, which would make the comparison
// with hnswlib one of compiler flags. Holds a pointer into the storage, so
// it is made after every add.
struct UnitIpDis : faiss::DistanceComputer {
    const float *xb, *q = nullptr;
    size_t d;
    bool avx2;
    UnitIpDis(const faiss::IndexHNSWFlat &ix, bool use_avx2)
        : xb(static_cast<const faiss::IndexFlat *>(ix.storage)->get_xb()), d((size_t)ix.d), avx2(use_avx2) {}
    float dot(const float *a, const float *b) const {
        return avx2 ? kernels_dot_f32_avx2(a, b, (int64_t)d) : kernels_dot_f32_scalar(a, b, (int64_t)d);
    }
    void set_query(const float *x) override { q = x; }
    float operator()(idx_t i) override { return -dot(q, xb + (size_t)i * d); }
    float symmetric_dis(idx_t i, idx_t j) override { return -dot(xb + (size_t)i * d, xb + (size_t)j * d); }
};

}  // namespace

struct faiss_shim {
    faiss::IndexHNSWFlat index;
    std::vector<omp_lock_t> locks;   // one per slot of capacity, all initialised
    faiss::VisitedTable vt{0};
    bool avx2;
    faiss_shim(int dim, int m, bool use_avx2) : index(dim, m, faiss::METRIC_INNER_PRODUCT), avx2(use_avx2) {}
    ~faiss_shim() {
        for (auto &l : locks) omp_destroy_lock(&l);
    }
    // capacity for n points: fresh locks (the old ones are unlocked and
    // destroyed), visited flags extended with zeros (= not visited)
    void reserve(size_t n) {
        if (n <= locks.size()) return;
        size_t cap = locks.size() ? locks.size() : 1024;
        while (cap < n) cap *= 2;
        std::vector<omp_lock_t> nl(cap);
        for (auto &l : nl) omp_init_lock(&l);
        for (auto &l : locks) omp_destroy_lock(&l);
        locks.swap(nl);
        vt.visited.resize(cap, 0);
    }
};

extern "C" int faiss_shim_new(int dim, int m, int ef_construction, uint64_t seed, int use_avx2, faiss_shim **out,
                              char *msg, size_t msg_cap) {
    *out = nullptr;
    try {
        faiss_shim *f = new faiss_shim(dim, m, use_avx2 != 0);
        f->index.hnsw.efConstruction = ef_construction;
        f->index.hnsw.rng = faiss::RandomGenerator((int64_t)seed);
        *out = f;
        return 0;
    } catch (...) {
        return shim_fail_current(msg, msg_cap, "out of memory for the FAISS index",
                                 "unknown C++ exception in FAISS");
    }
}

extern "C" void faiss_shim_free(faiss_shim *f) {
    delete f;
}

extern "C" int faiss_shim_add(faiss_shim *f, const float *x, int n, char *msg, size_t msg_cap) {
    try {
        faiss::IndexHNSWFlat &ix = f->index;
        f->reserve((size_t)ix.ntotal + (size_t)n);
        for (int t = 0; t < n; t++) {
            // as faiss::hnsw_add_vertices does for one point, single-threaded
            const float *xt = x + (size_t)t * ix.d;
            faiss::Index::idx_t id = ix.ntotal;
            ix.storage->add(1, xt);
            ix.ntotal = ix.storage->ntotal;
            ix.hnsw.prepare_level_tab(1, false);
            int level = ix.hnsw.levels[id] - 1;
            UnitIpDis dis(ix, f->avx2); // after the add: it points into the storage
            dis.set_query(xt);
            ix.hnsw.add_with_locks(dis, level, (int)id, f->locks, f->vt);
        }
        return 0;
    } catch (...) {
        return shim_fail_current(msg, msg_cap, "out of memory growing the FAISS index",
                                 "unknown C++ exception in FAISS");
    }
}

extern "C" size_t faiss_shim_count(const faiss_shim *f) {
    return (size_t)f->index.ntotal;
}

extern "C" int faiss_shim_reset(faiss_shim *f, uint64_t seed) {
    try {
        f->index.reset();
        f->vt.advance();
        f->index.hnsw.rng = faiss::RandomGenerator((int64_t)seed);
        return 0;
    } catch (...) {
        return 2;
    }
}

extern "C" int faiss_shim_search(faiss_shim *f, const float *q, int k, int ef, select_filter_fn filter,
                                 void *ctx, int64_t *labels, float *sims, int64_t *n_dist, uint64_t *n_bytes) {
    try {
        if (f->index.ntotal == 0 || k <= 0) return 0;
        faiss::IndexHNSWFlat &ix = f->index;
        CFilter sel(filter, ctx);
        faiss::SearchParametersHNSW p;
        p.efSearch = ef > k ? ef : k;
        p.sel = filter ? &sel : nullptr;
        ix.hnsw.efSearch = p.efSearch;
        std::vector<faiss::Index::idx_t> ids((size_t)k);
        std::vector<float> d((size_t)k);
        UnitIpDis dis(ix, f->avx2);
        dis.set_query(q);
        // the result arrays are a max-heap on -similarity, sorted at the end
        faiss::maxheap_heapify(k, d.data(), ids.data());
        faiss::HNSWStats st = ix.hnsw.search(dis, k, ids.data(), d.data(), f->vt, &p);
        faiss::maxheap_reorder(k, d.data(), ids.data());
        // FAISS 1.7.3 counts the bottom-layer distance computations in n3
        const int64_t nd = (int64_t)(st.n3 + st.ndis);
        if (n_dist) *n_dist += nd;
        if (n_bytes) *n_bytes += (uint64_t)nd * (ix.d * sizeof(float) + sizeof(faiss::HNSW::storage_idx_t));
        // best first; missing ones are -1
        int n = 0;
        for (int i = 0; i < k; i++) {
            if (ids[i] < 0) continue;
            labels[n] = (int64_t)ids[i];
            sims[n] = -d[i];
            n++;
        }
        return n;
    } catch (...) {
        return -1;
    }
}

extern "C" const float *faiss_shim_vectors(const faiss_shim *f, size_t *stride) {
    *stride = (size_t)f->index.d;
    return static_cast<const faiss::IndexFlat *>(f->index.storage)->get_xb();
}

extern "C" size_t faiss_shim_bytes(const faiss_shim *f) {
    const faiss::HNSW &g = f->index.hnsw;
    return sizeof *f + (size_t)f->index.ntotal * f->index.d * sizeof(float) +
           g.neighbors.capacity() * sizeof(faiss::HNSW::storage_idx_t) + g.levels.capacity() * sizeof(int) +
           g.offsets.capacity() * sizeof(size_t) + g.assign_probas.size() * sizeof(double);
}

#endif
