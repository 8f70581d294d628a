// Package e2e runs sless end to end on the real KEDA operator and HTTP add-on: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, KEDA and its metrics API server,
// the add-on's interceptor/scaler/operator,
// versitygw, RabbitMQ and PostgreSQL, a real OCI registry holding base-image stand-ins, the
// real kaniko executor and the platform image (make image), and sless installed from
// config/ with that image. The one stand-in is a process kubelet — three of them, one per node,
// each with its own address and pod range — that pulls each Pod's images and runs its
// containers from them, each in namespaces of its own (runtime_test.go). The nodes share the
// host's network namespace and image store.
//
// The test binary re-executes itself inside a private network and mount namespace (it must
// run as root): the add-on binds 0.0.0.0 and components find each other by Service DNS names,
// which a private /etc/hosts supplies. The machine's RabbitMQ and PostgreSQL are bridged in
// through unix sockets. Run with `make test-e2e` or
//
//	go test -tags e2e -count=1 -timeout 45m -parallel 8 -v ./test/e2e/
//
// Journeys that share nothing but the ground and mostly wait — minute ticks, scale-downs,
// the cold-start series, the Dockerfile's long build — run in parallel (t.Parallel), after the
// serial ones: those that stop or crash what every journey uses (the registry outage, the
// gateway SIGKILLed by the async journey) and those whose time is kaniko builds: builds share
// the ground's 2 cores, so the suite's time is bound by their sum, not by how they overlap.
// Waits on a build's outcome leave out a wait for a build slot (--max-concurrent-builds).
// Figures measured in the parallel part (cold starts) are taken beside the
// others; run a journey alone with -run for quiet-machine figures.
//
// Without the e2e build tag the package is empty, so `go test ./...` does not run it.
package e2e
