/* Session files: a context's cached tokens saved to disk and loaded back
 * (subq_context_save / subq_context_load in include/subq.h), like
 * llama.cpp's session files. The container is GGUF:
 *   subq.session.version            u32 (SESSION_VERSION)
 *   subq.session.model_fingerprint  u64  the model the KV rows belong to
 *   subq.session.n_ctx, n_past      u32  capacity at save time, tokens held
 *   subq.session.kv_type            str  "f32" | "f16"
 *   subq.session.plan               str  one line per sparse layer
 *                                        (attn_stage_describe), "full" if none
 *   tokens                 i32 [n_past]
 *   logits                 f32 [n_vocab]          (optional: of the last token)
 *   kv.L.H.k, kv.L.H.v     kv_type [head_dim, n_past]  per layer L and KV head H
 *   search.L               f32 [d_search, n_past]  stored search keys of sparse
 *                                                  layer L, when it has a search space
 *   index.L                i8 [bytes]   (optional) layer L's index over those keys
 *                                       (hnsw: its graph, select/hnsw_graph.h)
 * Loading links each index from its saved graph, or rebuilds it from the
 * stored keys (and native-key selectors and completion summaries from the
 * KV rows), so the loaded context answers as the saved one did.
 *
 * A context's KV file FILE gets the same index.L tensors in FILE.hnsw
 * (subq.indexes.version u32, subq.indexes.n_past u32, the tokens they
 * cover), written when the context is freed. The KV file commits rows
 * every second; a graph changes at every insert, so it is saved once, at
 * the end. A resume links the graph over as many of its first keys as it
 * covers and inserts the rest; a missing, stale or damaged one is rebuilt
 * from the keys (each graph carries the checksum of the keys it was built
 * on and its own). */
#ifndef SUBQ_SESSION_H
#define SUBQ_SESSION_H

#include "gguf/gguf.h"
#include "model/context.h"

#define SESSION_VERSION 1

/* Load from an open file into c (replacing what c holds). On failure c is
 * left empty. */
subq_status session_load_gguf(subq_context *c, const gguf_file *f, subq_error *err);

#endif
