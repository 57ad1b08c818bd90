/* Shared between the library's files; not part of the API. */
#ifndef DSQ_INTERNAL_H
#define DSQ_INTERNAL_H

#include <pthread.h>

#include "devicesdk.h"

#define DSQ_META_SIZE 32
#define DSQ_STATE_SIZE 40
#define DSQ_HEADER_SIZE 16 /* u32 length, u32 CRC-32C, u64 sequence number */
#define DSQ_MAX_SEGMENT_WALK 1000000 /* bound on loops over segments */

/* One reading of the batch being built or sent: where it ends on disk. */
typedef struct dsq_batch_item {
    uint64_t seq;
    uint64_t seg;     /* first sequence number of its segment */
    uint64_t end_off; /* byte offset just past its record */
} dsq_batch_item;

/* A position in the queue: a segment (by its first sequence number), a byte
 * offset in it and the sequence number expected there. */
typedef struct dsq_cursor {
    uint64_t seg, off, seq;
    int fd;        /* the segment, opened for reading; -1: not yet */
    uint64_t size; /* its size */
} dsq_cursor;

/* A record's header and payload head as read from disk. */
typedef struct dsq_rec {
    uint32_t len; /* payload length */
    uint32_t crc;
    uint64_t seq;
    int kind;
    int64_t time;
    uint8_t boot[16];
    uint8_t raw[DSQ_HEADER_SIZE + DSQ_PAYLOAD_HEAD]; /* as on disk */
} dsq_rec;

struct dsq {
    dsq_allocator al;
    pthread_mutex_t mu;
    int dirfd;
    int meta_fd; /* holds the queue's lock (flock) */
    char *dir;
    size_t dir_size;
    uint8_t id[16];
    uint64_t max_bytes, segment_bytes;
    int policy;
    int64_t max_age_ms;

    /* the state: head and its position, the batch being sent */
    uint64_t head, head_seg, head_off;
    uint64_t batch_first;
    uint32_t batch_count;
    uint64_t batch_last_seg; /* segment of its last reading (memory only) */

    /* the segment being appended to */
    int act_fd;
    uint64_t act_first, act_size;
    int act_full;  /* closed: the next record starts a new segment */
    int act_dirty; /* written since its last fsync */

    uint64_t next_seq, queued, bytes;
    dsq_status st;
    int has_sender;
};

#define DSQ_TOKEN_MAX 4096

struct dsq_sender {
    dsq *q;
    dsq_sender_options o; /* url: the endpoint's (strings); serial, tokens: NULL */
    char *strings;        /* base URL + DSQ_EVENTS_PATH, escaped serial */
    size_t strings_size;
    char *serial_json;    /* the serial, JSON-escaped, without quotes */
    char *auth[2];        /* "Bearer <token>": primary, secondary */
    int has_secondary, using_secondary;
    int switched;       /* the other token was tried since the last success */
    uint32_t token_gen; /* bumped by dsq_sender_set_tokens */
    dsq_backoff backoff;
    uint64_t rng;

    char *body; /* batch_bytes */
    size_t body_len;
    uint64_t body_first;
    uint32_t body_count;
    uint32_t body_no_time; /* its readings sent without a time */
    int body_valid;
    dsq_batch_item *items; /* batch_readings */
    uint8_t *results;      /* batch_readings */
    char *answer;          /* the answer's text */
    size_t answer_cap;
    size_t alloc_size;     /* of the block holding all of the above */
    void *block;

    int64_t next_at; /* monotonic ms of the next attempt */
    uint64_t limit_until; /* after a split: batches up to here are smaller */
    uint32_t limit_count;
    void *curl;
};

/* Builds the batch at the head (batch.c), mutex held: resends the batch in
 * state if there is one, else makes one and writes it to state. Returns its
 * length (0: nothing to send; *clock_wait set if readings wait for the
 * clock) or a negative error. */
int dsq__build_batch(dsq_sender *s, int *clock_wait);

/* Allocation through the queue's hook (alloc.c). */
void *dsq__alloc(const dsq_allocator *al, size_t n);
void dsq__free(const dsq_allocator *al, void *p, size_t n);

/* meta, state and the lock (meta.c); called with q->mu held or at open. */
int dsq__fsync_dir(dsq *q);
int dsq__write_state(dsq *q);
/* Reads state if it is there and whole; else head 1, offset 0. */
int dsq__read_state(dsq *q, uint64_t *off);
/* Reads meta, or makes it (with a random id) if the queue is new. */
int dsq__open_meta(dsq *q);
/* flock on meta: DSQ_EBUSY if another open holds it. */
int dsq__lock_queue(dsq *q);

/* Segments (segments.c); called with q->mu held or at open. */
int dsq__seg_next(dsq *q, uint64_t after, uint64_t *first);
int dsq__seg_size(dsq *q, uint64_t first, uint64_t *size);
int dsq__unlink_seg(dsq *q, uint64_t first);
int dsq__delete_settled(dsq *q);
void dsq__normalize_head(dsq *q);
/* At open: walks the segments in order, deletes those settled, syncs and
 * checks the others (a torn tail cut) and sets the head's segment and
 * next_seq (at least floor). */
int dsq__load_segments(dsq *q, uint64_t state_off, uint64_t floor);

/* Reading records (reader.c); called with q->mu held. */
void dsq__cursor_at_head(dsq *q, dsq_cursor *c);
void dsq__cursor_close(dsq_cursor *c);
/* 1: a record's header is in r; 0: the end of the queue; <0: error (then
 * DSQ_ECORRUPT means the record at c is not whole). */
int dsq__cursor_peek(dsq *q, dsq_cursor *c, dsq_rec *r);
/* Reads its data (r->len - 32 bytes) to dst, checks the CRC and moves c on. */
int dsq__cursor_read_data(dsq *q, dsq_cursor *c, const dsq_rec *r, char *dst);
/* Moves c past the record without reading its data. */
void dsq__cursor_skip(dsq_cursor *c, const dsq_rec *r);
/* Cuts the queue at c (a record that is not whole): the head moves to the
 * next segment, or to the end; the readings lost are counted corrupt. */
int dsq__cut_corrupt(dsq *q, const dsq_cursor *c);

/* Files (fileio.c). */
int dsq__pread_full(int fd, void *buf, size_t n, uint64_t off);
int dsq__pwrite_full(int fd, const void *buf, size_t n, uint64_t off);
void dsq__put_u32(uint8_t *b, uint32_t v);
void dsq__put_u64(uint8_t *b, uint64_t v);
uint32_t dsq__get_u32(const uint8_t *b);
uint64_t dsq__get_u64(const uint8_t *b);
void dsq__seg_name(char out[32], uint64_t first);

/* Clocks (clock.c). */
int64_t dsq__wall_ms(void);
int64_t dsq__mono_ms(void);
/* Milliseconds since boot and the boot's id (16 bytes); 0 or -1. */
int dsq__boot_now(int64_t *uptime_ms, uint8_t boot_id[16]);
int dsq__random(void *buf, size_t n);
void dsq__sleep_ms(int64_t ms);

/* Calendar (timefmt.c): days since 1970-01-01 of a proleptic Gregorian date. */
int64_t dsq__days_from_civil(int64_t y, int m, int d);

/* The libcurl transport (http_curl.c). */
int dsq__curl_open(const dsq_allocator *al, void **ctx);
void dsq__curl_close(const dsq_allocator *al, void *ctx);
int dsq__curl_post(void *ctx, const dsq_http_request *req, dsq_http_answer *ans);

#endif
