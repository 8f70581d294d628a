-- One row per invocation attempt. Reads are per namespace (optionally per function), newest
-- first with (started_at, id) as the stable keyset cursor; the indexes serve exactly that.
CREATE TABLE invocations (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    namespace   text        NOT NULL,
    function    text        NOT NULL,
    trigger     text        NOT NULL DEFAULT '',
    kind        text        NOT NULL,
    started_at  timestamptz NOT NULL,
    duration_us bigint      NOT NULL,
    status      text        NOT NULL,
    http_status integer     NOT NULL DEFAULT 0,
    error       text        NOT NULL DEFAULT '',
    trace_id    text        NOT NULL DEFAULT ''
);

CREATE INDEX invocations_namespace_start ON invocations (namespace, started_at DESC, id DESC);
CREATE INDEX invocations_function_start ON invocations (namespace, function, started_at DESC, id DESC);
