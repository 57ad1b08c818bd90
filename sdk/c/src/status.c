/* The status as one JSON line. */
#include <stdio.h>

#include "internal.h"

int dsq_status_json(const dsq_status *st, char *out, size_t cap)
{
    int n = snprintf(out, cap,
        "{\"queued\":%llu,\"bytes_on_disk\":%llu,\"next_seq\":%llu,\"requests\":%llu,"
        "\"sent\":%llu,\"stored\":%llu,\"refused\":%llu,\"refused_format\":%llu,"
        "\"refused_data\":%llu,\"refused_connections\":%llu,\"refused_too_large\":%llu,"
        "\"refused_other\":%llu,\"dropped\":%llu,\"dropped_torn\":%llu,\"dropped_full\":%llu,"
        "\"dropped_age\":%llu,\"dropped_corrupt\":%llu,\"refused_full\":%llu,\"no_time\":%llu,"
        "\"last_http_status\":%ld,\"next_attempt_ms\":%lld}",
        (unsigned long long)st->queued, (unsigned long long)st->bytes_on_disk,
        (unsigned long long)st->next_seq, (unsigned long long)st->requests,
        (unsigned long long)st->sent, (unsigned long long)st->stored,
        (unsigned long long)st->refused, (unsigned long long)st->refused_format,
        (unsigned long long)st->refused_data, (unsigned long long)st->refused_connections,
        (unsigned long long)st->refused_too_large, (unsigned long long)st->refused_other,
        (unsigned long long)st->dropped, (unsigned long long)st->dropped_torn,
        (unsigned long long)st->dropped_full, (unsigned long long)st->dropped_age,
        (unsigned long long)st->dropped_corrupt, (unsigned long long)st->refused_full,
        (unsigned long long)st->no_time, st->last_http_status, (long long)st->next_attempt_ms);
    return (n < 0 || (size_t)n >= cap) ? DSQ_EINVAL : DSQ_OK;
}

const char *dsq_strerror(int err)
{
    switch (err) {
    case DSQ_OK: return "ok";
    case DSQ_EINVAL: return "invalid argument";
    case DSQ_EIO: return "i/o error";
    case DSQ_ENOMEM: return "out of memory";
    case DSQ_EFULL: return "queue full";
    case DSQ_ECORRUPT: return "queue corrupt";
    case DSQ_ETOOBIG: return "reading too large";
    case DSQ_EBUSY: return "queue in use by another process";
    case DSQ_EHTTP: return "http client setup failed";
    default: return "unknown error";
    }
}
