-- Device event service schema. Applied idempotently by writer-worker at start;
-- {db} is replaced by the configured database. Release 1.0.0 created these
-- tables as they are; a release that changes them upgrades the previous
-- release's tables in place (testdata/<release>.sql holds each release's
-- schema, and TestUpgradesThePreviousReleasesSchema applies it and migrates). Written for ClickHouse 18.16
-- (Debian 12) and current releases alike: no DateTime64, Map, TTL or
-- LowCardinality.
--
-- Only what cannot be derived is stored: ClickHouse's cost per insert grows
-- with the number of stored columns (each allocates its own write buffers),
-- so ts, ts_ms, value_num and value_type are ALIAS columns, computed when read.
--
-- Times are Int64 Unix seconds or nanoseconds, and every partition key names
-- 'UTC': partitions are months and days of UTC whatever the server's
-- <timezone>. Tables created by earlier releases keep the key they were
-- created with (ClickHouse cannot change a partition key in place), in the
-- server's zone; the retention sweep reads each table's key and converts its
-- partitions' bounds in the zone it names (docs/operations.md, "Retention").

CREATE DATABASE IF NOT EXISTS {db};

-- One row per stored reading of an entity input, in reading time: ts_ns is
-- the time the device measured it (the request's ts, the device's timestamp
-- input, or the receive time), received_ns when ingest-api received it.
-- Partitions are months of reading time. A replayed event carries the same
-- (entity, input, ts_ns, event_id, device_input), so ReplacingMergeTree folds
-- any duplicate. The writer also skips events it has already stored.
CREATE TABLE IF NOT EXISTS {db}.input_values
(
    entity        String,
    input         String,
    ts_ns         Int64,               -- reading time, epoch ns
    received_ns   Int64 DEFAULT ts_ns, -- receive time, epoch ns: unique per ingest process, keeps arrival order
    serial        String,              -- device that sent the reading
    device_input  String,              -- the device input name the value came in as
    event_id      String,
    value_json    String,              -- the value exactly as sent, as JSON text
    ts            DateTime ALIAS toDateTime(intDiv(ts_ns, 1000000000)),
    ts_ms         Int64 ALIAS intDiv(ts_ns, 1000000),
    value_num     Nullable(Float64) ALIAS multiIf(value_json = 'true', 1., value_json = 'false', 0., toFloat64OrNull(value_json)),
    value_type    Enum8('number' = 1, 'bool' = 2, 'string' = 3, 'object' = 4, 'array' = 5) ALIAS multiIf(
                      value_json IN ('true', 'false'), 'bool', substring(value_json, 1, 1) = '"', 'string',
                      substring(value_json, 1, 1) = '{', 'object', substring(value_json, 1, 1) = '[', 'array', 'number')
)
ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(toDateTime(intDiv(ts_ns, 1000000000), 'UTC'))
ORDER BY (entity, input, ts_ns, event_id, device_input);

-- One row per authenticated, well-formed message: the device's Messages view,
-- in receive order (ts_ns is the receive time). payload is the body as
-- received with accessToken removed. outcome is the response message the
-- request was answered with. reading_ns is the reading's time; time_note says
-- why a time the device sent was not used (out of bounds, not a time).
CREATE TABLE IF NOT EXISTS {db}.device_messages
(
    serial     String,
    ts_ns      Int64,
    event_id   String,
    payload    String,
    outcome    String,
    reading_ns Int64 DEFAULT ts_ns,
    time_note  String DEFAULT '',
    token      String DEFAULT '',
    ts         DateTime ALIAS toDateTime(intDiv(ts_ns, 1000000000)),
    ts_ms      Int64 ALIAS intDiv(ts_ns, 1000000)
)
ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(toDateTime(intDiv(ts_ns, 1000000000), 'UTC'))
ORDER BY (serial, ts_ns, event_id);

-- One row per keyed event (a request with an Idempotency-Key) whose outcome is
-- final: the event id is derived from (serial, key), so a retry finds the
-- outcome of the first attempt here. Rows older than the idempotency window
-- (IDEMPOTENCY_WINDOW) are ignored by lookups, and writer-worker drops whole
-- days of them once they are past it.
CREATE TABLE IF NOT EXISTS {db}.event_keys
(
    event_id   String,
    ts_ns      Int64,              -- receive time of the attempt that was answered
    outcome    UInt8               -- outcome code (pkg/outcome): 0 stored, 7 no connections
)
ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMMDD(toDateTime(intDiv(ts_ns, 1000000000), 'UTC'))
ORDER BY event_id
-- Point lookups only: small granules mean a lookup reads ~9 KB per part
-- instead of ~300 KB (measured: 15 ids cost 2.0 ms of server CPU instead of 3.4).
SETTINGS index_granularity = 256;

-- Device diagnostics (pkg/diag): what became of each device's requests,
-- counted by ingest-api and mapper-worker and written in reports every
-- 10 s. serial '' holds requests that named no serial, and serials not
-- provisioned beyond those a process tracks by name (256 a minute).
-- device_stats: requests and readings per serial, minute and kind (the
-- answer's outcome name, or mqtt_device); merges sum a minute's reports.
CREATE TABLE IF NOT EXISTS {db}.device_stats
(
    serial     String,
    minute     Int64,              -- start of the minute, Unix seconds
    kind       String,
    requests   UInt64,
    readings   UInt64
)
ENGINE = SummingMergeTree((requests, readings))
PARTITION BY toYYYYMMDD(toDateTime(minute, 'UTC'))
ORDER BY (serial, minute, kind);

-- device_stats_hourly: the same by hour, for the fleet view and long
-- ranges (1/60 of the rows).
CREATE TABLE IF NOT EXISTS {db}.device_stats_hourly
(
    serial     String,
    hour       Int64,              -- start of the hour, Unix seconds
    kind       String,
    requests   UInt64,
    readings   UInt64
)
ENGINE = SummingMergeTree((requests, readings))
PARTITION BY toYYYYMM(toDateTime(hour, 'UTC'))
ORDER BY (serial, hour, kind);

-- device_seen: each serial's latest request and its kind (merges keep the
-- latest; a query takes the greatest last_ns).
CREATE TABLE IF NOT EXISTS {db}.device_seen
(
    serial     String,
    last_ns    Int64,
    kind       String
)
ENGINE = ReplacingMergeTree(last_ns)
ORDER BY serial;

-- device_rejections: the latest three rejections of a serial per report,
-- with the answer's texts and the client address.
CREATE TABLE IF NOT EXISTS {db}.device_rejections
(
    serial     String,
    ts_ns      Int64,
    kind       String,
    message    String,
    error      String,
    source     String
)
ENGINE = MergeTree()
PARTITION BY toYYYYMMDD(toDateTime(intDiv(ts_ns, 1000000000), 'UTC'))
ORDER BY (serial, ts_ns);

-- device_keys: data keys of a device's readings that matched no connected
-- input, per report: how often, and the latest value (JSON text, clipped).
CREATE TABLE IF NOT EXISTS {db}.device_keys
(
    serial     String,
    key        String,
    ts_ns      Int64,              -- the latest in the report
    count      UInt64,
    value      String
)
ENGINE = MergeTree()
PARTITION BY toYYYYMMDD(toDateTime(intDiv(ts_ns, 1000000000), 'UTC'))
ORDER BY (serial, key, ts_ns);

-- The rollups of input_values (writer-worker/internal/rollup): per entity
-- input and minute (input_minutes) or hour (input_hours) of reading time,
-- the distinct readings, how many of them are numbers or booleans, their
-- min, max and sum, and the latest reading (greatest ts_ns, then
-- received_ns, then cityHash64(event_id, device_input)) with its value. A bucket is
-- recomputed whole from the readings below it whenever one lands in it (a
-- late, replayed or backfilled one too), so a duplicate counts once;
-- merges keep the newest computation. Charts of long ranges read them.
CREATE TABLE IF NOT EXISTS {db}.input_minutes
(
    entity            String,
    input             String,
    bucket            Int64,              -- start of the minute, Unix seconds
    readings          UInt64,
    numbers           UInt64,
    min_value         Nullable(Float64),
    max_value         Nullable(Float64),
    sum_value         Float64,
    last_ns           Int64,              -- the latest reading's time
    last_value        String,             -- and its value
    version           Int64               -- when it was computed, epoch ns
)
ENGINE = ReplacingMergeTree(version)
PARTITION BY toYYYYMM(toDateTime(bucket, 'UTC'))
ORDER BY (entity, input, bucket);

CREATE TABLE IF NOT EXISTS {db}.input_hours
(
    entity            String,
    input             String,
    bucket            Int64,              -- start of the hour, Unix seconds
    readings          UInt64,
    numbers           UInt64,
    min_value         Nullable(Float64),
    max_value         Nullable(Float64),
    sum_value         Float64,
    last_ns           Int64,
    last_value        String,
    version           Int64
)
ENGINE = ReplacingMergeTree(version)
PARTITION BY toYear(toDateTime(bucket, 'UTC'))
ORDER BY (entity, input, bucket);

-- rollup_dirty: the minutes of entity inputs that readings were stored in,
-- written with the raw messages (every 500 ms) and read by the rollup in
-- order of marked_ns; days older than two are dropped.
CREATE TABLE IF NOT EXISTS {db}.rollup_dirty
(
    marked_ns  Int64,
    entity     String,
    input      String,
    minute     Int64                      -- start of the minute, Unix seconds
)
ENGINE = MergeTree()
PARTITION BY toYYYYMMDD(toDateTime(intDiv(marked_ns, 1000000000), 'UTC'))
ORDER BY marked_ns;

-- retention_periods: the periods the retention sweep keeps (writer-worker/
-- internal/janitor), recorded in one place. The first writer copy to start
-- records its RETENTION and IDEMPOTENCY_WINDOW (source 'start'); a copy
-- started with others logs them and sweeps with these. An operator changes
-- one with `writer-worker retention -set` (source 'operator'): the latest
-- operator row of a kind wins, else its longest start row. Rows are never
-- deleted: the table is the history of the changes.
CREATE TABLE IF NOT EXISTS {db}.retention_periods
(
    kind       String,
    period_ns  Int64,
    set_ns     Int64,
    source     String                     -- 'start' or 'operator'
)
ENGINE = MergeTree()
ORDER BY (kind, set_ns);
