-- The service's schema for replicated storage (ClickHouse 18.16 and current
-- releases, ZooKeeper or Keeper): one shard, every table a
-- ReplicatedReplacingMergeTree. Generated from writer-worker/schema
-- (go run ./writer-worker schema -replicated); writer-worker with
-- CLICKHOUSE_REPLICATED=true applies the same on every address it is given.
-- Each server needs the macros {shard} and {replica} (see
-- deploy/clickhouse/cluster.sh); run this on every replica.

CREATE DATABASE IF NOT EXISTS device_events;

CREATE TABLE IF NOT EXISTS device_events.input_values
(
    entity        String,
    input         String,
    ts_ns         Int64,
    received_ns   Int64 DEFAULT ts_ns,
    serial        String,
    device_input  String,
    event_id      String,
    value_json    String,
    ts            DateTime ALIAS toDateTime(intDiv(ts_ns, 1000000000)),
    ts_ms         Int64 ALIAS intDiv(ts_ns, 1000000),
    value_num     Nullable(Float64) ALIAS multiIf(value_json = 'true', 1., value_json = 'false', 0., toFloat64OrNull(value_json)),
    value_type    Enum8('number' = 1, 'bool' = 2, 'string' = 3, 'object' = 4, 'array' = 5) ALIAS multiIf(
                      value_json IN ('true', 'false'), 'bool', substring(value_json, 1, 1) = '"', 'string',
                      substring(value_json, 1, 1) = '{', 'object', substring(value_json, 1, 1) = '[', 'array', 'number')
)
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/device_events.input_values', '{replica}')
PARTITION BY toYYYYMM(toDateTime(intDiv(ts_ns, 1000000000), 'UTC'))
ORDER BY (entity, input, ts_ns, event_id, device_input);

CREATE TABLE IF NOT EXISTS device_events.device_messages
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
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/device_events.device_messages', '{replica}')
PARTITION BY toYYYYMM(toDateTime(intDiv(ts_ns, 1000000000), 'UTC'))
ORDER BY (serial, ts_ns, event_id);

CREATE TABLE IF NOT EXISTS device_events.event_keys
(
    event_id   String,
    ts_ns      Int64,
    outcome    UInt8
)
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/device_events.event_keys', '{replica}')
PARTITION BY toYYYYMMDD(toDateTime(intDiv(ts_ns, 1000000000), 'UTC'))
ORDER BY event_id
SETTINGS index_granularity = 256;

CREATE TABLE IF NOT EXISTS device_events.device_stats
(
    serial     String,
    minute     Int64,
    kind       String,
    requests   UInt64,
    readings   UInt64
)
ENGINE = ReplicatedSummingMergeTree('/clickhouse/tables/{shard}/device_events.device_stats', '{replica}', (requests, readings))
PARTITION BY toYYYYMMDD(toDateTime(minute, 'UTC'))
ORDER BY (serial, minute, kind);

CREATE TABLE IF NOT EXISTS device_events.device_stats_hourly
(
    serial     String,
    hour       Int64,
    kind       String,
    requests   UInt64,
    readings   UInt64
)
ENGINE = ReplicatedSummingMergeTree('/clickhouse/tables/{shard}/device_events.device_stats_hourly', '{replica}', (requests, readings))
PARTITION BY toYYYYMM(toDateTime(hour, 'UTC'))
ORDER BY (serial, hour, kind);

CREATE TABLE IF NOT EXISTS device_events.device_seen
(
    serial     String,
    last_ns    Int64,
    kind       String
)
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/device_events.device_seen', '{replica}', last_ns)
ORDER BY serial;

CREATE TABLE IF NOT EXISTS device_events.device_rejections
(
    serial     String,
    ts_ns      Int64,
    kind       String,
    message    String,
    error      String,
    source     String
)
ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/device_events.device_rejections', '{replica}')
PARTITION BY toYYYYMMDD(toDateTime(intDiv(ts_ns, 1000000000), 'UTC'))
ORDER BY (serial, ts_ns);

CREATE TABLE IF NOT EXISTS device_events.device_keys
(
    serial     String,
    key        String,
    ts_ns      Int64,
    count      UInt64,
    value      String
)
ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/device_events.device_keys', '{replica}')
PARTITION BY toYYYYMMDD(toDateTime(intDiv(ts_ns, 1000000000), 'UTC'))
ORDER BY (serial, key, ts_ns);

CREATE TABLE IF NOT EXISTS device_events.input_minutes
(
    entity            String,
    input             String,
    bucket            Int64,
    readings          UInt64,
    numbers           UInt64,
    min_value         Nullable(Float64),
    max_value         Nullable(Float64),
    sum_value         Float64,
    last_ns           Int64,
    last_value        String,
    version           Int64
)
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/device_events.input_minutes', '{replica}', version)
PARTITION BY toYYYYMM(toDateTime(bucket, 'UTC'))
ORDER BY (entity, input, bucket);

CREATE TABLE IF NOT EXISTS device_events.input_hours
(
    entity            String,
    input             String,
    bucket            Int64,
    readings          UInt64,
    numbers           UInt64,
    min_value         Nullable(Float64),
    max_value         Nullable(Float64),
    sum_value         Float64,
    last_ns           Int64,
    last_value        String,
    version           Int64
)
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/device_events.input_hours', '{replica}', version)
PARTITION BY toYear(toDateTime(bucket, 'UTC'))
ORDER BY (entity, input, bucket);

CREATE TABLE IF NOT EXISTS device_events.rollup_dirty
(
    marked_ns  Int64,
    entity     String,
    input      String,
    minute     Int64
)
ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/device_events.rollup_dirty', '{replica}')
PARTITION BY toYYYYMMDD(toDateTime(intDiv(marked_ns, 1000000000), 'UTC'))
ORDER BY marked_ns;

CREATE TABLE IF NOT EXISTS device_events.retention_periods
(
    kind       String,
    period_ns  Int64,
    set_ns     Int64,
    source     String
)
ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/device_events.retention_periods', '{replica}')
ORDER BY (kind, set_ns);

