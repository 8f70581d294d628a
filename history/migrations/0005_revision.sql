-- The revision of the function that served the invocation ('' before functions had revisions).
ALTER TABLE invocations ADD COLUMN revision text NOT NULL DEFAULT '';
