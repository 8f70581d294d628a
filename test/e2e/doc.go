// Package e2e runs sless end to end on the real KEDA operator and HTTP add-on: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, KEDA and its metrics API server,
// the add-on's interceptor/scaler/operator,
// versitygw, RabbitMQ and PostgreSQL, a real OCI registry holding base-image stand-ins, the
// real kaniko executor and the platform image (make image), and sless installed with that
// image by its Helm chart (config/helm/sless) through the Helm SDK. The one stand-in is a process kubelet — three of them, one per node,
// each with its own address and pod range — that pulls each Pod's images and runs its
// containers from them, each in namespaces of its own (runtime_test.go). The nodes share the
// host's network namespace and image store.
//
// The test binary re-executes itself inside a private network and mount namespace (it must
// run as root): the add-on binds 0.0.0.0 and components find each other by Service DNS names,
// which a private /etc/hosts supplies. The machine's RabbitMQ and PostgreSQL are bridged in
// through unix sockets. Run with `make test-e2e` or
//
//	go test -tags e2e -count=1 -timeout 45m -parallel 32 -v ./test/e2e/
//
// Every journey runs in parallel (t.Parallel) except the few that stop or crash what every
// journey uses — the registry outage, the gateway SIGKILLed by the async journey — which Go
// runs first, alone. The operator runs two kaniko builds at a time (--max-concurrent-builds)
// and queues the rest, so the journeys' builds overlap the others' waits (minute ticks,
// scale-downs, the Dockerfile's long build) without crowding the 2 cores; waits on a build's
// outcome leave out the wait for a slot. The figure tests (TestColdStartFigures,
// TestBuildFigures) run only under make bench (SLESS_E2E_BENCH=1); run a journey alone with
// -run for quiet-machine figures.
//
// Without the e2e build tag the package is empty, so `go test ./...` does not run it.
package e2e
