package cluster_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sless.dev/sless/gateway/cluster"
	"sless.dev/sless/rules"
	"sless.dev/sless/test/testenv"
)

// TestIdentityMaster: the operator and the gateway, starting together, end up with one
// master key — made once, random, kept in its Secret — and a Secret that holds no valid key
// is an error that does not quote what it holds.
func TestIdentityMaster(t *testing.T) {
	testenv.Need(t)
	ctx := context.Background()
	const ns = "identity-master"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	masters := make([][]byte, 6)
	var wg sync.WaitGroup
	for i := range masters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := cluster.IdentityMaster(ctx, env.Client, ns, "sless-identity")
			if err != nil {
				t.Error(err)
			}
			masters[i] = m
		}()
	}
	wg.Wait()
	for _, m := range masters {
		if len(m) != rules.IdentityMasterBytes || !bytes.Equal(m, masters[0]) {
			t.Fatalf("masters %x: want one key of %d bytes", masters, rules.IdentityMasterBytes)
		}
	}
	if bytes.Equal(masters[0], make([]byte, rules.IdentityMasterBytes)) {
		t.Fatal("the master is all zeros")
	}
	bad := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "broken", Namespace: ns}, Data: map[string][]byte{"master": []byte("not-hex-but-secret")}}
	if err := env.Client.Create(ctx, bad); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.IdentityMaster(ctx, env.Client, ns, "broken"); err == nil || strings.Contains(err.Error(), "not-hex-but-secret") {
		t.Errorf("a broken master secret: %v", err)
	}
}
