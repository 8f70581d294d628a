// Package faults is the fault-injection suite: real sless processes (`sless dev`,
// `sless dispatcher`, `sless gateway` on a real kube-apiserver) under thousands of HTTP
// invocations and AMQP messages, killed with SIGKILL and restarted, while a private RabbitMQ
// node and a private PostgreSQL cluster — started by the suite on free loopback ports, never
// the machine's own — are stopped and started under them.
//
// Every invocation carries an id, and the function reports each id it ran to the suite's
// ledger server, so lost messages and duplicates are exact counts; the history is counted in
// PostgreSQL against that ledger. The measured table is printed at the end (and written to
// $SLESS_FAULTS_REPORT when set); docs/reliability.md publishes it. Run with
// `make test-faults` or
//
//	go test -tags faults -count=1 -timeout 15m -v ./test/faults/
//
// Without the faults build tag the package is empty, so `go test ./...` does not run it.
package faults
