-- An HTTP invocation's time to first byte (when the function's header arrived), the bytes of
-- its answer's body sent to the caller, and whether it was a stream (no length: chunked, SSE)
-- or an upgraded connection. 0 / false for records written before, and for other kinds.
ALTER TABLE invocations ADD COLUMN ttfb_us bigint NOT NULL DEFAULT 0;
ALTER TABLE invocations ADD COLUMN bytes_sent bigint NOT NULL DEFAULT 0;
ALTER TABLE invocations ADD COLUMN streamed boolean NOT NULL DEFAULT false;
