/*
 * devicesdk: C SDK for devices posting readings to the telemetry service.
 *
 * A reading is recorded to a durable queue on the device's disk (queue
 * format version 1, docs/sdk.md, shared with the Go SDK) and a sender drains
 * the queue, oldest first, in backlog requests
 * (POST /api/v1/deviceapi/events).
 *
 * C99, POSIX, libcurl. The library allocates only when a queue or a sender is
 * opened; recording and sending allocate nothing (libcurl's own allocations
 * per request aside). Queue calls are thread safe (one mutex per queue); a
 * sender is driven by one thread at a time.
 */
#ifndef DEVICESDK_H
#define DEVICESDK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Errors: every function returning int returns DSQ_OK or one of these. */
enum {
    DSQ_OK = 0,
    DSQ_EINVAL = -1,   /* bad argument (data not a JSON object, bad kind...) */
    DSQ_EIO = -2,      /* a file operation failed (errno is kept) */
    DSQ_ENOMEM = -3,   /* the allocator failed (at open only) */
    DSQ_EFULL = -4,    /* the queue is full (RefuseNewest, or nothing to drop) */
    DSQ_ECORRUPT = -5, /* meta is not a version 1 queue's */
    DSQ_ETOOBIG = -6,  /* a reading larger than MaxRecordBytes */
    DSQ_EBUSY = -7,    /* the queue is open in another process */
    DSQ_EHTTP = -8     /* the HTTP client could not be set up */
};

/* Time kinds of a reading (docs/sdk.md, "Queue format"). */
enum {
    DSQ_TIME_NONE = 0, /* no time: stored at receive time */
    DSQ_TIME_WALL = 1, /* time: Unix milliseconds */
    DSQ_TIME_BOOT = 2  /* time: milliseconds since this boot */
};

/* What a full queue does with a new reading. */
enum {
    DSQ_DROP_OLDEST = 0,  /* drop the oldest segment not being sent (default) */
    DSQ_REFUSE_NEWEST = 1 /* dsq_record returns DSQ_EFULL */
};

#define DSQ_MAX_RECORD_BYTES (1u << 20) /* payload bound on disk */
#define DSQ_PAYLOAD_HEAD 32u            /* kind, 7 zero bytes, time, boot id */
#define DSQ_MAX_DATA_BYTES (DSQ_MAX_RECORD_BYTES - DSQ_PAYLOAD_HEAD)
#define DSQ_CLOCK_EPOCH_MS INT64_C(1577836800000) /* 2020-01-01T00:00:00Z */

/* Allocation hook: every byte the library allocates goes through it. */
typedef struct dsq_allocator {
    void *(*alloc)(void *ctx, size_t size); /* NULL: malloc */
    void (*free)(void *ctx, void *p, size_t size);
    void *ctx;
} dsq_allocator;

typedef struct dsq_options {
    uint64_t max_bytes;     /* segments on disk; 0: 64 MiB */
    uint64_t segment_bytes; /* a segment is closed past this; 0: 4 MiB */
    int full_policy;        /* DSQ_DROP_OLDEST or DSQ_REFUSE_NEWEST */
    int64_t max_age_ms;     /* readings older are dropped unsent; 0: none */
    dsq_allocator allocator;
} dsq_options;

/* Fills the defaults. */
void dsq_options_init(dsq_options *o);

typedef struct dsq dsq;

/* Opens (or makes) the queue in directory dir (made if absent). Cuts a torn
 * tail (counted as dropped, reason torn). o may be NULL (defaults). */
int dsq_open(const char *dir, const dsq_options *o, dsq **out);
/* Closes the queue; close its sender first. */
void dsq_close(dsq *q);

/* Records one reading: data_json is a JSON object (NUL-terminated UTF-8).
 * Returns once the record and the file's length are synced, with the
 * reading's sequence number (> 0), or a negative DSQ_E* error. A kind 1
 * time before 2020 (DSQ_CLOCK_EPOCH_MS) is a clock not set: the reading
 * is sent without a time. */
int64_t dsq_record(dsq *q, const char *data_json, int time_kind, int64_t time);

/* Records a reading with the current time: wall clock when it is set (after
 * 2020-01-01), else milliseconds since boot (kind 2). */
int64_t dsq_record_now(dsq *q, const char *data_json);

typedef struct dsq_reading {
    const char *data_json;
    int time_kind;
    int64_t time;
} dsq_reading;

/* Records n readings with one sync. Returns the first one's sequence number;
 * on an error, the readings before the failing one are recorded and synced
 * and *recorded (if not NULL) says how many. */
int64_t dsq_record_all(dsq *q, const dsq_reading *r, size_t n, size_t *recorded);

/* The queue's id (16 bytes) as 32 lower-case hex digits and a NUL. */
void dsq_id_hex(const dsq *q, char out[33]);

/* One unsettled reading, as dsq_iterate gives it (data not NUL-terminated). */
typedef struct dsq_item {
    uint64_t seq;
    int time_kind;
    int64_t time;
    uint8_t boot_id[16];
    const char *data;
    size_t data_len;
} dsq_item;

/* Calls fn for each unsettled reading from the head, in order, with the
 * data in buf (cap bytes; a larger reading is given with data NULL). fn
 * returns 0 to go on. For tools and tests. */
int dsq_iterate(dsq *q, char *buf, size_t cap,
                int (*fn)(void *ctx, const dsq_item *it), void *ctx);

typedef struct dsq_status {
    uint64_t queued;        /* readings not yet settled */
    uint64_t bytes_on_disk; /* segment bytes */
    uint64_t next_seq;      /* the next reading's sequence number */
    uint64_t requests;      /* requests made */
    uint64_t sent;          /* readings put in requests (retries count again) */
    uint64_t stored;        /* readings the service stored */
    uint64_t refused;       /* readings the service refused for good */
    uint64_t refused_format;      /* of those: "Invalid message format" */
    uint64_t refused_data;        /* "Invalid data format" */
    uint64_t refused_connections; /* "No connections configured" */
    uint64_t refused_too_large;   /* 413 for one reading, or over BatchBytes */
    uint64_t refused_other;       /* any other message */
    uint64_t dropped;       /* readings dropped unsent (sum of the below) */
    uint64_t dropped_torn;  /* cut (or found lost) when the queue was opened */
    uint64_t dropped_full;  /* dropped by DropOldest */
    uint64_t dropped_age;   /* older than max_age_ms */
    uint64_t dropped_corrupt; /* failed their checksum when read to send */
    uint64_t refused_full;  /* dsq_record calls refused: queue full */
    uint64_t no_time;       /* readings sent without their own time: counted
                               once, when the batch is answered 200 */
    long last_http_status;  /* 0: none yet or a network error */
    int64_t next_attempt_ms; /* Unix ms of the next attempt; 0: now or idle */
} dsq_status;

/* The queue's counters (sender fields 0 unless a sender is attached). */
void dsq_get_status(dsq *q, dsq_status *st);

/* The status as one JSON object (no newline); 1 KiB is enough. */
int dsq_status_json(const dsq_status *st, char *out, size_t cap);

/* A short name of a DSQ_E* error. */
const char *dsq_strerror(int err);

/* ---- Sender ---- */

typedef struct dsq_sender dsq_sender;

/* A request as the transport sees it. */
typedef struct dsq_http_request {
    const char *url;
    const char *body;
    size_t body_len;
    const char *authorization; /* "Bearer <token>" */
    const char *idempotency_key;
    long timeout_ms;
    long connect_timeout_ms;
} dsq_http_request;

/* The answer: status 0 on a network error or a timeout. The transport
 * writes at most body_cap bytes to body (more is cut, body_truncated set). */
typedef struct dsq_http_answer {
    long status;
    char *body;
    size_t body_len;
    size_t body_cap;
    int body_truncated;
    char retry_after[64]; /* the header's value, "" if absent */
} dsq_http_answer;

typedef int (*dsq_transport_fn)(void *ctx, const dsq_http_request *req,
                                dsq_http_answer *ans);

/* The endpoint's path, appended to dsq_sender_options.url. */
#define DSQ_EVENTS_PATH "/api/v1/deviceapi/events"

enum { DSQ_LOG_DEBUG = 0, DSQ_LOG_INFO = 1, DSQ_LOG_WARN = 2, DSQ_LOG_ERROR = 3 };

typedef struct dsq_sender_options {
    /* The service's base URL, e.g. https://ingest.example.com; requests go
     * to it (trailing slashes dropped) + DSQ_EVENTS_PATH, as in sdk/go. */
    const char *url;
    const char *serial;
    const char *token;           /* the device token */
    const char *secondary_token; /* on 401/403 the tokens alternate; may be NULL */
    uint32_t batch_readings;     /* 0: 1000 */
    uint32_t batch_bytes;        /* body bytes; 0: 512 KiB */
    long request_timeout_ms;     /* 0: 30 s */
    long connect_timeout_ms;     /* 0: 10 s */
    int64_t base_backoff_ms;     /* 0: 1 s */
    int64_t max_backoff_ms;      /* 0: 5 min */
    uint32_t backoff_calm;       /* successes before shrinking; 0: 3 */
    int64_t auth_wait_ms;        /* 0: 5 min */
    int64_t clock_wait_ms;       /* kind 2 readings wait this long; 0: 1 h */
    int send_without_time;       /* UnsetClock: SendWithoutTime */
    /* Called on 401/403 (never with a token); may call dsq_sender_set_tokens,
     * whose primary is then tried at once. */
    void (*on_auth_failure)(void *ctx, long http_status, int secondary_in_use);
    /* Log lines (never holding a token). NULL: silent. */
    void (*log)(void *ctx, int level, const char *msg);
    void *ctx;
    dsq_transport_fn transport;  /* NULL: libcurl */
    void *transport_ctx;
} dsq_sender_options;

void dsq_sender_options_init(dsq_sender_options *o);

/* Attaches a sender to q (one per queue). Allocates its batch buffer here.
 * DSQ_EINVAL: a NULL or empty url (after its trailing slashes are dropped)
 * or serial, a missing or bad token, or q already has a sender. */
int dsq_sender_open(dsq *q, const dsq_sender_options *o, dsq_sender **out);
void dsq_sender_close(dsq_sender *s);

/* Replaces the tokens (secondary may be NULL); longer than 4 KiB: EINVAL. */
int dsq_sender_set_tokens(dsq_sender *s, const char *token, const char *secondary);

/* Does one attempt if one is due. *wait_ms: how long until the next call
 * is useful (0: at once; -1: the queue is empty). */
int dsq_sender_step(dsq_sender *s, int64_t *wait_ms);

/* Steps and sleeps until the queue is empty, timeout_ms passed, or *stop
 * (if not NULL) became non-zero. Returns 0 when the queue is empty, 1 when
 * readings are still queued, or a negative DSQ_E* error. */
int dsq_sender_drain(dsq_sender *s, int64_t timeout_ms, volatile int *stop);

/* ---- Pieces, exposed for tests ---- */

uint32_t dsq_crc32c(uint32_t crc, const void *p, size_t n); /* crc: 0 to start */

/* Retry-After: seconds or an HTTP date (IMF-fixdate, RFC 850, asctime),
 * against now (Unix seconds); capped at 3600 s. Returns 1 and *wait_ms, or
 * 0 if v is not a valid value. */
int dsq_parse_retry_after(const char *v, int64_t now_unix_s, int64_t *wait_ms);

typedef struct dsq_backoff {
    int64_t base_ms, max_ms;
    uint32_t calm;
    uint32_t step;      /* the exponent n */
    uint32_t successes; /* in a row */
} dsq_backoff;

void dsq_backoff_init(dsq_backoff *b, int64_t base_ms, int64_t max_ms, uint32_t calm);
/* The wait after a failure (a uniform draw in [0, min(max, base*2^n)] from
 * random), then one step up. */
int64_t dsq_backoff_fail(dsq_backoff *b, uint64_t random);
/* One success: the step shrinks by one after calm successes in a row. */
void dsq_backoff_success(dsq_backoff *b);
/* The current bound min(max, base*2^n). */
int64_t dsq_backoff_bound(const dsq_backoff *b);

/* Why the service refused a message, by its message text. */
enum {
    DSQ_RESULT_STORED = 0,
    DSQ_RESULT_FORMAT = 1,      /* Invalid message format */
    DSQ_RESULT_DATA = 2,        /* Invalid data format */
    DSQ_RESULT_CONNECTIONS = 3, /* No connections configured */
    DSQ_RESULT_OTHER = 4,
    DSQ_RESULT_TOO_LARGE = 5    /* 413 for one reading (sender only) */
};

typedef struct dsq_answer {
    int success;        /* 1 true, 0 false, -1 absent */
    char message[128];  /* the answer's message, cut to fit */
    int has_results;    /* a results array was there */
    size_t results;     /* its length (all of them, even past max) */
} dsq_answer;

/* Reads an answer {success, message, error?, results?}; results[i] gets
 * DSQ_RESULT_* for the first max results. Returns 0, or -1 if the text is
 * not a JSON object. */
int dsq_scan_answer(const char *text, size_t len, dsq_answer *a,
                    uint8_t *results, size_t max);

/* Renders Unix ms as RFC 3339 UTC with milliseconds and Z (24 chars and a
 * NUL). Returns 0, or -1 outside the years 0000..9999. */
int dsq_format_time(int64_t unix_ms, char out[25]);

#ifdef __cplusplus
}
#endif
#endif
