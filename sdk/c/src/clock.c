/* Wall and monotonic clocks, the time since boot, randomness, sleeping. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

int64_t dsq__wall_ms(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return 0;
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t dsq__mono_ms(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
        return 0;
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int read_small_file(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n;
    if (fd < 0)
        return -1;
    do {
        n = read(fd, buf, cap - 1);
    } while (n < 0 && errno == EINTR);
    (void)close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    return 0;
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* A UUID's 32 hex digits (dashes skipped) as 16 bytes. */
static int parse_uuid(const char *s, uint8_t out[16])
{
    size_t n = 0;
    for (; *s != '\0' && *s != '\n' && n < 32; s++) {
        int v;
        if (*s == '-')
            continue;
        v = hex_value(*s);
        if (v < 0)
            return -1;
        if (n % 2 == 0)
            out[n / 2] = (uint8_t)(v << 4);
        else
            out[n / 2] = (uint8_t)(out[n / 2] | v);
        n++;
    }
    return n == 32 ? 0 : -1;
}

/* /proc/uptime: "12345.67 ..." (seconds with two decimals). */
static int parse_uptime(const char *s, int64_t *ms)
{
    int64_t sec = 0, frac = 0;
    int digits = 0, fd = 0;
    for (; *s >= '0' && *s <= '9' && digits < 15; s++, digits++)
        sec = sec * 10 + (*s - '0');
    if (digits == 0)
        return -1;
    if (*s == '.') {
        for (s++; *s >= '0' && *s <= '9' && fd < 3; s++, fd++)
            frac = frac * 10 + (*s - '0');
    }
    for (; fd < 3; fd++)
        frac *= 10;
    *ms = sec * 1000 + frac;
    return 0;
}

int dsq__boot_now(int64_t *uptime_ms, uint8_t boot_id[16])
{
    char buf[128];
    if (read_small_file("/proc/sys/kernel/random/boot_id", buf, sizeof buf) != 0 ||
        parse_uuid(buf, boot_id) != 0)
        return -1;
    if (read_small_file("/proc/uptime", buf, sizeof buf) != 0 || parse_uptime(buf, uptime_ms) != 0)
        return -1;
    return 0;
}

int dsq__random(void *buf, size_t n)
{
    char *p = (char *)buf;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        p += r;
        n -= (size_t)r;
    }
    (void)close(fd);
    return n == 0 ? 0 : -1;
}

void dsq__sleep_ms(int64_t ms)
{
    struct timespec ts;
    if (ms <= 0)
        return;
    ts.tv_sec = (time_t)(ms / 1000);
    ts.tv_nsec = (long)(ms % 1000) * 1000000L;
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}
