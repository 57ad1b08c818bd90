-- Device event service schema. Applied idempotently by writer-worker at start;
-- {db} is replaced by the configured database. Written for ClickHouse 18.16
-- (Debian 12) and current releases alike: no DateTime64, Map, TTL or
-- LowCardinality. Milliseconds are kept as epoch Int64 columns beside a DateTime.

CREATE DATABASE IF NOT EXISTS {db};

-- One row per stored reading of an entity input. A replayed event carries the
-- same (entity, input, ts_ns, event_id, device_input), so ReplacingMergeTree
-- folds any duplicate; the writer also skips events it has already stored.
CREATE TABLE IF NOT EXISTS {db}.input_values
(
    entity        String,
    input         String,
    ts            DateTime,            -- receive time, seconds (partitioning)
    ts_ms         Int64,               -- receive time, epoch milliseconds
    ts_ns         Int64,               -- receive time, epoch ns; unique per ingest process, keeps arrival order
    serial        String,              -- device that sent the reading
    device_input  String,              -- the device input name the value came in as
    event_id      String,
    value_type    Enum8('number' = 1, 'bool' = 2, 'string' = 3, 'object' = 4, 'array' = 5),
    value_num     Nullable(Float64),   -- numbers, and booleans as 1/0: aggregate this
    value_json    String,              -- the value exactly as sent, as JSON text
    stored_at     DateTime DEFAULT now()
)
ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(ts)
ORDER BY (entity, input, ts_ns, event_id, device_input);

-- One row per authenticated, well-formed message: the device's Messages view.
-- payload is the body as received with accessToken removed.
CREATE TABLE IF NOT EXISTS {db}.device_messages
(
    serial     String,
    ts         DateTime,
    ts_ms      Int64,
    ts_ns      Int64,
    event_id   String,
    payload    String,
    outcome    String,                 -- the response message the request was answered with
    stored_at  DateTime DEFAULT now()
)
ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(ts)
ORDER BY (serial, ts_ns, event_id);
