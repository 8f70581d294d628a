-- Asynchronous invocations, from 202 Accepted to their outcome. The idempotency key is unique
-- per function; an empty key is no key.
CREATE TABLE async_invocations (
    id              text        PRIMARY KEY,
    namespace       text        NOT NULL,
    function        text        NOT NULL,
    idempotency_key text        NOT NULL DEFAULT '',
    status          text        NOT NULL,
    attempts        integer     NOT NULL DEFAULT 0,
    max_attempts    integer     NOT NULL,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    http_status     integer     NOT NULL DEFAULT 0,
    result          bytea,
    truncated       boolean     NOT NULL DEFAULT false,
    content_type    text        NOT NULL DEFAULT '',
    error           text        NOT NULL DEFAULT '',
    callback_url    text        NOT NULL DEFAULT '',
    cold_start      boolean     NOT NULL DEFAULT false
);

CREATE UNIQUE INDEX async_invocations_idempotency ON async_invocations (namespace, function, idempotency_key) WHERE idempotency_key <> '';
CREATE INDEX async_invocations_namespace_created ON async_invocations (namespace, created_at DESC);
