/* Whole reads and writes, little-endian integers, segment names. */
#include <errno.h>
#include <stdio.h>
#include <unistd.h>

#include "internal.h"

int dsq__pread_full(int fd, void *buf, size_t n, uint64_t off)
{
    char *p = (char *)buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return DSQ_EIO;
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return DSQ_OK;
}

int dsq__pwrite_full(int fd, const void *buf, size_t n, uint64_t off)
{
    const char *p = (const char *)buf;
    while (n > 0) {
        ssize_t r = pwrite(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return DSQ_EIO;
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return DSQ_OK;
}

void dsq__put_u32(uint8_t *b, uint32_t v)
{
    int i;
    for (i = 0; i < 4; i++)
        b[i] = (uint8_t)(v >> (8 * i));
}

void dsq__put_u64(uint8_t *b, uint64_t v)
{
    int i;
    for (i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
}

uint32_t dsq__get_u32(const uint8_t *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

uint64_t dsq__get_u64(const uint8_t *b)
{
    return (uint64_t)dsq__get_u32(b) | (uint64_t)dsq__get_u32(b + 4) << 32;
}

void dsq__seg_name(char out[32], uint64_t first)
{
    (void)snprintf(out, 32, "%020llu.seg", (unsigned long long)first);
}
