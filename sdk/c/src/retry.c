/* Retry-After parsing and the exponential back-off with full jitter. */
#include <string.h>

#include "internal.h"

#define RETRY_AFTER_CAP_S 3600

static const char *skip_spaces(const char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    return s;
}

static int parse_digits(const char **sp, int min, int max, int64_t *out)
{
    const char *s = *sp;
    int64_t v = 0;
    int n = 0;
    while (*s >= '0' && *s <= '9' && n < max) {
        v = v * 10 + (*s - '0');
        s++;
        n++;
    }
    if (n < min || (*s >= '0' && *s <= '9'))
        return -1;
    *out = v;
    *sp = s;
    return 0;
}

static int parse_month(const char **sp, int *month)
{
    static const char names[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
    int i;
    for (i = 0; i < 12; i++) {
        if (strncmp(*sp, names + 3 * i, 3) == 0) {
            *month = i + 1;
            *sp += 3;
            return 0;
        }
    }
    return -1;
}

static int expect(const char **sp, char c)
{
    if (**sp != c)
        return -1;
    (*sp)++;
    return 0;
}

/* hh:mm:ss */
static int parse_clock(const char **sp, int64_t *secs)
{
    int64_t h, m, s;
    if (parse_digits(sp, 2, 2, &h) || expect(sp, ':') || parse_digits(sp, 2, 2, &m) ||
        expect(sp, ':') || parse_digits(sp, 2, 2, &s) || h > 23 || m > 59 || s > 60)
        return -1;
    *secs = h * 3600 + m * 60 + s;
    return 0;
}

static int skip_day_name(const char **sp)
{
    const char *s = *sp;
    int n = 0;
    while (((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z')) && n < 9) {
        s++;
        n++;
    }
    if (n < 3)
        return -1;
    *sp = s;
    return 0;
}

/* IMF-fixdate "Sun, 06 Nov 1994 08:49:37 GMT", RFC 850
 * "Sunday, 06-Nov-94 08:49:37 GMT", asctime "Sun Nov  6 08:49:37 1994". */
static int parse_http_date(const char *s, int64_t *unix_s)
{
    int64_t day, year, secs;
    int month;
    if (skip_day_name(&s))
        return -1;
    if (*s == ',') {
        char sep;
        s = skip_spaces(s + 1);
        if (parse_digits(&s, 1, 2, &day))
            return -1;
        sep = *s;
        if ((sep != ' ' && sep != '-') || expect(&s, sep) || parse_month(&s, &month) ||
            expect(&s, sep) || parse_digits(&s, 2, 4, &year) || expect(&s, ' ') ||
            parse_clock(&s, &secs))
            return -1;
        if (year < 100)
            year += year < 70 ? 2000 : 1900;
        s = skip_spaces(s);
        if (strncmp(s, "GMT", 3) != 0)
            return -1;
        s += 3;
    } else {
        if (expect(&s, ' ') || parse_month(&s, &month))
            return -1;
        s = skip_spaces(s);
        if (parse_digits(&s, 1, 2, &day) || expect(&s, ' ') || parse_clock(&s, &secs) ||
            expect(&s, ' ') || parse_digits(&s, 4, 4, &year))
            return -1;
    }
    if (*skip_spaces(s) != '\0' || day < 1 || day > 31)
        return -1;
    *unix_s = dsq__days_from_civil(year, month, (int)day) * 86400 + secs;
    return 0;
}

int dsq_parse_retry_after(const char *v, int64_t now_unix_s, int64_t *wait_ms)
{
    int64_t secs, at;
    const char *s;
    if (v == NULL)
        return 0;
    s = skip_spaces(v);
    if (*s >= '0' && *s <= '9') {
        int n = 0;
        secs = 0;
        while (*s >= '0' && *s <= '9') {
            if (n < 12)
                secs = secs * 10 + (*s - '0');
            else
                secs = RETRY_AFTER_CAP_S; /* absurdly long: capped below */
            s++;
            n++;
        }
        if (*skip_spaces(s) != '\0')
            return 0;
    } else if (parse_http_date(s, &at) == 0) {
        secs = at > now_unix_s ? at - now_unix_s : 0;
    } else {
        return 0;
    }
    if (secs > RETRY_AFTER_CAP_S)
        secs = RETRY_AFTER_CAP_S;
    *wait_ms = secs * 1000;
    return 1;
}

void dsq_backoff_init(dsq_backoff *b, int64_t base_ms, int64_t max_ms, uint32_t calm)
{
    b->base_ms = base_ms > 0 ? base_ms : 1;
    b->max_ms = max_ms >= b->base_ms ? max_ms : b->base_ms;
    b->calm = calm > 0 ? calm : 1;
    b->step = 0;
    b->successes = 0;
}

int64_t dsq_backoff_bound(const dsq_backoff *b)
{
    int64_t bound = b->base_ms;
    uint32_t i;
    for (i = 0; i < b->step && bound < b->max_ms; i++)
        bound *= 2;
    return bound < b->max_ms ? bound : b->max_ms;
}

int64_t dsq_backoff_fail(dsq_backoff *b, uint64_t random)
{
    int64_t bound = dsq_backoff_bound(b);
    b->successes = 0;
    if (bound < b->max_ms)
        b->step++;
    return (int64_t)(random % (uint64_t)(bound + 1));
}

void dsq_backoff_success(dsq_backoff *b)
{
    if (b->step == 0) {
        b->successes = 0;
        return;
    }
    b->successes++;
    if (b->successes >= b->calm) {
        b->step--;
        b->successes = 0;
    }
}
