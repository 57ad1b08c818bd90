-- The schema for a replicated ClickHouse cluster (current releases, with
-- ClickHouse Keeper): apply once with clickhouse-client before starting
-- writer-worker, replacing {cluster} and {db}. It keeps the table names
-- writer-worker uses, as Distributed tables over replicated local ones, so
-- the writer's own CREATE TABLE IF NOT EXISTS statements do nothing.
--
-- Required for success: true to mean "queryable": the writer's user must
-- insert synchronously into the Distributed tables, e.g. in its profile
--   <distributed_foreground_insert>1</distributed_foreground_insert>
-- (insert_distributed_sync=1 on releases before 23.x). Otherwise an INSERT
-- returns once the rows are queued on the local node, not stored in shards.
-- Not tested here: the development machines have ClickHouse 18.16 only.

CREATE DATABASE IF NOT EXISTS {db} ON CLUSTER '{cluster}';

CREATE TABLE IF NOT EXISTS {db}.input_values_local ON CLUSTER '{cluster}'
(
    entity String, input String, ts_ns Int64, serial String, device_input String, event_id String, value_json String,
    ts DateTime ALIAS toDateTime(intDiv(ts_ns, 1000000000)),
    ts_ms Int64 ALIAS intDiv(ts_ns, 1000000),
    value_num Nullable(Float64) ALIAS multiIf(value_json = 'true', 1., value_json = 'false', 0., toFloat64OrNull(value_json)),
    value_type Enum8('number' = 1, 'bool' = 2, 'string' = 3, 'object' = 4, 'array' = 5) ALIAS multiIf(
        value_json IN ('true', 'false'), 'bool', substring(value_json, 1, 1) = '"', 'string',
        substring(value_json, 1, 1) = '{', 'object', substring(value_json, 1, 1) = '[', 'array', 'number')
)
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{db}/input_values', '{replica}')
PARTITION BY toYYYYMM(toDateTime(intDiv(ts_ns, 1000000000)))
ORDER BY (entity, input, ts_ns, event_id, device_input);

-- Sharded by entity: one entity's series stays on one shard.
CREATE TABLE IF NOT EXISTS {db}.input_values ON CLUSTER '{cluster}' AS {db}.input_values_local
ENGINE = Distributed('{cluster}', {db}, input_values_local, cityHash64(entity));

CREATE TABLE IF NOT EXISTS {db}.device_messages_local ON CLUSTER '{cluster}'
(
    serial String, ts_ns Int64, event_id String, payload String, outcome String,
    ts DateTime ALIAS toDateTime(intDiv(ts_ns, 1000000000)),
    ts_ms Int64 ALIAS intDiv(ts_ns, 1000000)
)
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{db}/device_messages', '{replica}')
PARTITION BY toYYYYMM(toDateTime(intDiv(ts_ns, 1000000000)))
ORDER BY (serial, ts_ns, event_id);

CREATE TABLE IF NOT EXISTS {db}.device_messages ON CLUSTER '{cluster}' AS {db}.device_messages_local
ENGINE = Distributed('{cluster}', {db}, device_messages_local, cityHash64(serial));

-- Current releases have TTL: expiry needs no janitor here (the writer's
-- janitor finds no parts under the Distributed table and does nothing).
CREATE TABLE IF NOT EXISTS {db}.event_keys_local ON CLUSTER '{cluster}'
(
    event_id String, ts_ns Int64, outcome UInt8
)
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{db}/event_keys', '{replica}')
PARTITION BY toYYYYMMDD(toDateTime(intDiv(ts_ns, 1000000000)))
ORDER BY event_id
TTL toDateTime(intDiv(ts_ns, 1000000000)) + INTERVAL 2 DAY   -- keep at least IDEMPOTENCY_WINDOW + 1 day
SETTINGS index_granularity = 256;

CREATE TABLE IF NOT EXISTS {db}.event_keys ON CLUSTER '{cluster}' AS {db}.event_keys_local
ENGINE = Distributed('{cluster}', {db}, event_keys_local, cityHash64(event_id));
