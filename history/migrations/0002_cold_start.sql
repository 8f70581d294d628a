-- Whether the invocation waited for an instance to start.
ALTER TABLE invocations ADD COLUMN cold_start boolean NOT NULL DEFAULT false;
