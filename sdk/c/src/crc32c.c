/* CRC-32C (Castagnoli): polynomial 0x1EDC6F41, reflected (0x82F63B78),
 * initial value and final XOR 0xFFFFFFFF. Software, one 256-entry table. */
#include <pthread.h>

#include "devicesdk.h"

static uint32_t crc_table[256]; /* the only global mutable state */
static pthread_once_t crc_table_once = PTHREAD_ONCE_INIT;

static void crc_table_fill(void)
{
    uint32_t i;
    for (i = 0; i < 256; i++) {
        uint32_t c = i;
        int k;
        for (k = 0; k < 8; k++)
            c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
}

uint32_t dsq_crc32c(uint32_t crc, const void *p, size_t n)
{
    const unsigned char *b = (const unsigned char *)p;
    size_t i;
    (void)pthread_once(&crc_table_once, crc_table_fill);
    crc = ~crc;
    for (i = 0; i < n; i++)
        crc = crc_table[(crc ^ b[i]) & 0xFFu] ^ (crc >> 8);
    return ~crc;
}
