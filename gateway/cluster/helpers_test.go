package cluster_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/scaling"
)

// setStatus writes what the Function reconciler would: phase, routing host and URL.
func setStatus(t testing.TB, ns, name, host string, ready bool) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var fn v1alpha1.Function
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &fn); err != nil {
			return err
		}
		fn.Status.Phase = v1alpha1.FunctionBuilding
		if ready {
			fn.Status.Phase = v1alpha1.FunctionReady
		}
		fn.Status.ObservedGeneration = fn.Generation
		fn.Status.RoutingHost = host
		fn.Status.URL = "http://gateway.test/fn/" + ns + "/" + name
		return env.Client.Status().Update(context.Background(), &fn)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// addRevision creates what the Function reconciler would: revision n of function name, in
// phase.
func addRevision(t testing.TB, ns, name string, n int64, phase v1alpha1.RevisionPhase) {
	t.Helper()
	ctx := context.Background()
	var fn v1alpha1.Function
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &fn); err != nil {
		t.Fatal(err)
	}
	rev := scaling.MakeRevision(&fn, n)
	if err := env.Client.Create(ctx, rev); err != nil {
		t.Fatal(err)
	}
	rev.Status.Phase = phase
	if err := env.Client.Status().Update(ctx, rev); err != nil {
		t.Fatal(err)
	}
}

// setTraffic writes the traffic the Function reconciler would have resolved.
func setTraffic(t testing.TB, ns, name string, traffic ...v1alpha1.ResolvedTrafficTarget) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var fn v1alpha1.Function
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &fn); err != nil {
			return err
		}
		fn.Status.Traffic = traffic
		return env.Client.Status().Update(context.Background(), &fn)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// forge signs a well-formed token for sub with a key the gateway does not know.
func forge(t testing.TB, sub string) string {
	t.Helper()
	claims := jwt.RegisteredClaims{Subject: sub, ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte("some-other-key-0123456789abcdef0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func jsonRaw(s string) json.RawMessage { return json.RawMessage(s) }
