-- Usage rollups: per namespace, function and UTC hour, the sums of the invocations written
-- in that hour, upserted in the transaction that writes their records so usage is whole and
-- outlives the records. Durations in microseconds; mb_ms is memory_mb × billed milliseconds
-- (each invocation's duration rounded up to the millisecond). Counted from this migration on.
CREATE TABLE usage_hourly (
    namespace text NOT NULL,
    function text NOT NULL,
    hour timestamptz NOT NULL,
    invocations bigint NOT NULL,
    errors bigint NOT NULL,
    cold_starts bigint NOT NULL,
    duration_us bigint NOT NULL,
    mb_ms bigint NOT NULL,
    bytes_out bigint NOT NULL,
    PRIMARY KEY (namespace, function, hour)
);
-- A namespace's window across its functions.
CREATE INDEX usage_hourly_namespace_hour ON usage_hourly (namespace, hour);
