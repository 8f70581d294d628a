//go:build faults

package faults

import (
	"context"
	"encoding/hex"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/rules"
	"sless.dev/sless/scaling"
	"sless.dev/sless/test/testenv"
	"sless.dev/sless/test/testkit"
)

// TestKillGateway: the cluster gateway, on a real kube-apiserver with a Ready Function whose
// routing host the ledger function's wrapper process answers (standing where the KEDA
// interceptor would), killed with SIGKILL under 5,000 invocations and started again.
// Callers retry; what the kill cost the history is bounded.
func TestKillGateway(t *testing.T) {
	const scenario = "kill -9 `sless gateway`"
	ctrllog.SetLogger(logr.Discard()) // envtest logs through controller-runtime
	env := testenv.ForTest(t)
	const ns = "faults"
	readyFunction(t, env, ns, "ledger")
	db := s.pg.newDatabase(t, "kill_gateway")
	lg := newLedger(t)
	addr := testkit.FreeAddr(t)
	spec := procSpec{name: "gateway", argv: []string{s.sless, "gateway", "--listen", addr,
		"--interceptor-url", startFunction(t, "function-kill-gateway", lg), "--database-url", db, "--artifacts-dir", t.TempDir()},
		env: []string{"KUBECONFIG=" + writeKubeconfig(t, env.Config), "SLESS_JWT_HMAC_KEY=faults-suite-key-0123456789abcdef0123"}}
	gateway := startGateway(t, spec, addr)

	load := startHTTPLoad("http://"+addr+"/fn/"+ns+"/ledger", "g", invocations)
	if err := until(time.Minute, gateway, func() bool { return load.finished() >= invocations/3 }); err != nil {
		t.Fatalf("a third of the load: %v", err)
	}
	killed := time.Now()
	gateway.kill(t)
	f := fault{at: killed, over: time.Now()}
	startGateway(t, spec, addr)
	load.wait(t)

	l := readLedger(t, lg)
	c := l.count("g", invocations, f.over)
	if c.distinct != invocations {
		t.Errorf("%d invocations were answered 2xx without the function running them", invocations-c.distinct)
	}
	hist := settledHistory(t, db, ns, "ledger", map[string]int{"http": c.runs}, 2*time.Second)
	s.results.add(t, httpRow(scenario, load, c, hist["http"], f))
	assertHistoryLoss(t, "http", c.runs, hist["http"], killBound(l, "g", killed))
}

// startGateway starts the gateway and waits until it serves (its route table is synced
// before it listens).
func startGateway(t *testing.T, spec procSpec, addr string) *proc {
	t.Helper()
	p := startProcT(t, spec)
	if err := until(time.Minute, p, func() bool { return healthy("http://" + addr + "/healthz") }); err != nil {
		t.Fatalf("sless gateway: %v", err)
	}
	return p
}

// readyFunction creates ns/name with the status the Function reconciler writes once the
// function is deployed: Ready, with its routing host.
func readyFunction(t *testing.T, env *testenv.Env, ns, name string) {
	t.Helper()
	ctx := context.Background()
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sless-system"}},
		// The master the gateway signs calls with (startFunction's key is derived from it).
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "sless-system", Name: "sless-identity"},
			Data: map[string][]byte{scaling.IdentityMasterField: []byte(hex.EncodeToString(faultsMaster))}},
	} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	fn := &v1alpha1.Function{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	fn.Spec.Runtime, fn.Spec.Image = ledgerRuntime, "registry.local/faults/ledger:v1"
	if err := env.Client.Create(ctx, fn); err != nil {
		t.Fatal(err)
	}
	fn.Status.Phase, fn.Status.ObservedGeneration = v1alpha1.FunctionReady, fn.Generation
	fn.Status.RoutingHost = rules.RoutingHost(ns, name, rules.DefaultDomain)
	if err := env.Client.Status().Update(ctx, fn); err != nil {
		t.Fatal(err)
	}
}

// writeKubeconfig writes cfg (envtest's admin client certificate) for `sless gateway`.
func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := testenv.WriteKubeconfig(cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}
