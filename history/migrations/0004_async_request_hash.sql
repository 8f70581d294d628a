-- The fingerprint of the request an idempotency key was first used with: the same key with
-- another request is refused instead of answered with this invocation.
ALTER TABLE async_invocations ADD COLUMN IF NOT EXISTS request_hash text NOT NULL DEFAULT '';
