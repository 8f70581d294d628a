//go:build e2e

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/test/images"
	"sless.dev/sless/test/testenv"
)

// TestGRPCOnTheCluster: a prebuilt image serving gRPC over HTTP/2 without TLS (protocol h2c,
// test/images/grpchealth) is called from zero by a real gRPC client, through the gateway (h2c,
// on the function's own host) and the real interceptor, which speaks h2c to the pods by the
// Service port's appProtocol. A unary call answers, a gRPC error arrives as its status, and a
// server-streaming call delivers each message as the server sends it, holding its pod past
// the scale-down period.
func TestGRPCOnTheCluster(t *testing.T) {
	t.Parallel()
	tn := newTenant(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "server")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "./test/images/grpchealth")
	build.Dir, build.Env = testenv.RepoRoot(), append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./test/images/grpchealth: %v\n%s", err, out)
	}
	ref, err := images.PushBinary(ctx, bin, registry+"/"+tn.ns+"/grpchealth:1", t.TempDir(), g.reg.Auth())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tn.c.CreateFunction(ctx, tn.ns, api.CreateFunction{Name: "health", FunctionFields: api.FunctionFields{
		Runtime: ptr.To("go1.25"), Image: ptr.To(ref), Protocol: ptr.To("h2c"), TimeoutSec: ptr.To(int32(60)), ScaleDownPeriodSec: ptr.To(int32(3))}}); err != nil {
		t.Fatal(err)
	}
	if fn := waitReady(t, tn, "health"); fn.Protocol != "h2c" {
		t.Errorf("the API answers protocol %q, want h2c", fn.Protocol)
	}
	waitServiceResolvable(t, tn, "health")
	var svc corev1.Service
	if err := g.client.Get(ctx, client.ObjectKey{Namespace: tn.ns, Name: workload(t, tn.ns, "health")}, &svc); err != nil {
		t.Fatal(err)
	}
	if p := svc.Spec.Ports[0].AppProtocol; p == nil || *p != "kubernetes.io/h2c" {
		t.Fatalf("the Service's port has appProtocol %v, want kubernetes.io/h2c (the interceptor would speak HTTP/1.1)", p)
	}
	waitScaledToZero(t, tn.ns, "health", 2*time.Minute)

	conn, err := grpc.NewClient("passthrough:///"+strings.TrimPrefix(g.gatewayURL, "http://"),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority("health."+tn.ns+"."+functionsDomain))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)

	var header metadata.MD
	res, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header))
	if err != nil {
		t.Fatalf("a unary call from zero: %v", err)
	}
	if res.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("Check: %v, want SERVING", res.Status)
	}
	if got := header.Get("x-sless-cold-start"); len(got) != 1 || got[0] != "true" {
		t.Errorf("the call did not start the function from zero: header %v", header)
	}
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("Check of an unknown service: %v, want the server's NotFound (from the trailers)", err)
	}

	// Watch sends the status now, then each flip, 300 ms apart: the messages must arrive as
	// sent, and the open stream holds the pod past the 3 s scale-down period.
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	w, err := hc.Watch(wctx, &healthpb.HealthCheckRequest{Service: "ticks"})
	if err != nil {
		t.Fatal(err)
	}
	var at []time.Time
	last := healthpb.HealthCheckResponse_SERVICE_UNKNOWN
	recv := func(n int) {
		t.Helper()
		for range n {
			m, err := w.Recv()
			if err != nil {
				t.Fatalf("Watch, message %d: %v", len(at), err)
			}
			if m.Status == last {
				t.Fatalf("Watch sent %v twice in a row", m.Status)
			}
			last = m.Status
			at = append(at, time.Now())
		}
	}
	// A watch never ends, so a buffering hop would deliver nothing at all; one that passes
	// messages on late would bunch them: three flips take 900 ms at the server.
	recv(4)
	if span := at[3].Sub(at[0]); span < 600*time.Millisecond {
		t.Errorf("4 messages within %v (gaps %v): held back and sent together, not as the server sent them", span, gaps(at))
	}
	time.Sleep(6 * time.Second) // past the 3 s scale-down period and KEDA's polling
	if d := deployment(t, tn.ns, "health"); d.Status.ReadyReplicas < 1 {
		t.Fatalf("the function scaled away while its stream was open: %d ready", d.Status.ReadyReplicas)
	}
	recv(2)
	stop()
	// Messages already received before the cancel may still be read; then the stream ends.
	for range 100 {
		if _, err = w.Recv(); err != nil {
			break
		}
	}
	if status.Code(err) != codes.Canceled {
		t.Errorf("after the caller cancelled: %v, want Canceled", err)
	}
}

// gaps lists the times between successive arrivals.
func gaps(at []time.Time) []time.Duration {
	var d []time.Duration
	for i := 1; i < len(at); i++ {
		d = append(d, at[i].Sub(at[i-1]).Round(time.Millisecond))
	}
	return d
}
