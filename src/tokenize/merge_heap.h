/* The priority queue of both tokenizers' merge loops: candidate merges of
 * adjacent symbols, best first. SentencePiece ranks a merge by the merged
 * token's score (higher first), byte-level BPE by its merge rank (lower
 * first: queued as score = -rank, exact in a float up to 2^24); ties go to
 * the leftmost pair, as both reference tokenizers do. */
#ifndef SUBQ_TOKENIZE_MERGE_HEAP_H
#define SUBQ_TOKENIZE_MERGE_HEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct merge_cand {
    float score;
    int32_t left, right;    /* symbol indices of the two sides */
    int32_t size;           /* what the caller checks for staleness (bytes, rank) */
} merge_cand;

typedef struct merge_heap {
    merge_cand *a;
    size_t n, cap;
} merge_heap;

/* false when out of memory (the heap is unchanged). */
bool merge_heap_push(merge_heap *h, merge_cand c);
/* The best candidate (h->n > 0). */
merge_cand merge_heap_pop(merge_heap *h);
void merge_heap_free(merge_heap *h);

#endif
