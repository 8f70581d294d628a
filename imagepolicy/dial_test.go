package imagepolicy_test

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"sless.dev/sless/imagepolicy"
)

// secret stands for what an internal service answers: it must reach no message.
const secret = "SECRET-MARKER-7f3a"

// internalServer is a loopback service nobody allowed; it counts the requests reaching it.
func internalServer(t *testing.T) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Error(w, secret, http.StatusNotFound)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

func host(srv *httptest.Server) string { return strings.TrimPrefix(srv.URL, "http://") }

func head(t *testing.T, p imagepolicy.Policy, image string) (name.Reference, error) {
	t.Helper()
	ref, err := name.ParseReference(image)
	if err != nil {
		t.Fatal(err)
	}
	_, err = remote.Head(ref, remote.WithContext(context.Background()), remote.WithTransport(p.Transport()))
	return ref, err
}

func newPolicy(t *testing.T, platform string, allowed ...string) imagepolicy.Policy {
	t.Helper()
	p, err := imagepolicy.New(platform, allowed)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTransportReachesConfiguredRegistries: the platform registry and an allowed one are
// dialed on loopback, as an in-cluster registry is on a private address.
func TestTransportReachesConfiguredRegistries(t *testing.T) {
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	img, err := random.Image(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(host(reg) + "/team-a/app:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	for what, p := range map[string]imagepolicy.Policy{
		"platform registry": newPolicy(t, host(reg)),
		"allowed registry":  newPolicy(t, "registry.sless-system:5000", host(reg)+"/team-a"),
	} {
		if _, err := head(t, p, ref.String()); err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
}

// TestTransportRefusesUnconfiguredLoopback: a registry host the policy does not name is
// refused at dial time when it is a loopback address; nothing reaches it.
func TestTransportRefusesUnconfiguredLoopback(t *testing.T) {
	internal, hits := internalServer(t)
	p := newPolicy(t, "registry.sless-system:5000", "ghcr.io")
	ref, err := head(t, p, host(internal)+"/x:y")
	if !errors.Is(err, imagepolicy.ErrRefusedAddress) {
		t.Fatalf("err %v, want %v", err, imagepolicy.ErrRefusedAddress)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("%d requests reached the internal server", n)
	}
	if msg := imagepolicy.Describe(err, ref); strings.Contains(msg, secret) || !strings.Contains(msg, "refused to connect") {
		t.Errorf("message %q", msg)
	}
}

// TestTransportRefusesRedirectToLoopback: an allowed registry that redirects to a loopback
// server nobody allowed does not get the operator to ask it.
func TestTransportRefusesRedirectToLoopback(t *testing.T) {
	internal, hits := internalServer(t)
	allowed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v2/" {
			w.WriteHeader(http.StatusOK) // the ping: no auth needed
			return
		}
		http.Redirect(w, r, internal.URL+"/internal"+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer allowed.Close()
	p := newPolicy(t, "registry.sless-system:5000", host(allowed))
	ref, err := head(t, p, host(allowed)+"/x:y")
	if !errors.Is(err, imagepolicy.ErrRefusedAddress) {
		t.Fatalf("err %v, want %v", err, imagepolicy.ErrRefusedAddress)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("%d requests reached the internal server", n)
	}
	if msg := imagepolicy.Describe(err, ref); strings.Contains(msg, secret) || strings.Contains(msg, host(internal)) {
		t.Errorf("message %q", msg)
	}
}

// TestDescribeCopiesNoBody: a registry's error answer is told by its status alone.
func TestDescribeCopiesNoBody(t *testing.T) {
	internal, _ := internalServer(t)
	// Allowed here, so it is asked: what it answers still reaches no message.
	p := newPolicy(t, host(internal))
	ref, err := name.ParseReference(host(internal) + "/x:y")
	if err != nil {
		t.Fatal(err)
	}
	_, err = remote.Get(ref, remote.WithTransport(p.Transport()))
	if err == nil || !strings.Contains(err.Error(), secret) {
		t.Fatalf("the test server's body is not in go-containerregistry's error: %v", err)
	}
	want := "registry " + host(internal) + " answered 404 for x:y"
	if msg := imagepolicy.Describe(err, ref); msg != want {
		t.Errorf("message %q, want %q", msg, want)
	}
}

// TestDescribeFixedMessages: whatever the error's text, the message is fixed.
func TestDescribeFixedMessages(t *testing.T) {
	ref, _ := name.ParseReference("ghcr.io/acme/x:1")
	for _, c := range []struct {
		err  error
		want string
	}{
		{context.DeadlineExceeded, "registry ghcr.io did not answer in time"},
		{errors.New(secret), "registry ghcr.io gave no usable answer"},
		{&net.DNSError{Err: secret, Name: "ghcr.io"}, "the name of registry ghcr.io does not resolve"},
		{&net.OpError{Op: "dial", Err: errors.New(secret)}, "cannot connect to registry ghcr.io"},
	} {
		if got := imagepolicy.Describe(c.err, ref); got != c.want {
			t.Errorf("Describe(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
