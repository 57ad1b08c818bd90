/* Allocation through the queue's hook (dsq_allocator; NULL: malloc). */
#include <stdlib.h>

#include "internal.h"

void *dsq__alloc(const dsq_allocator *al, size_t n)
{
    if (al->alloc != NULL)
        return al->alloc(al->ctx, n);
    return malloc(n);
}

void dsq__free(const dsq_allocator *al, void *p, size_t n)
{
    if (p == NULL)
        return;
    if (al->alloc != NULL) {
        if (al->free != NULL)
            al->free(al->ctx, p, n);
        return;
    }
    free(p);
}
