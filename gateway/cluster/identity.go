package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/rules"
	"sless.dev/sless/scaling"
)

// IdentityMaster reads the platform's master key — every function's key is derived from it
// (rules.FunctionKey) — from Secret namespace/name (key scaling.IdentityMasterField, hex),
// and creates that Secret with a random key when it does not exist: whichever of the
// operator and the gateway starts first makes it, the other reads it. The key goes into no
// log line or error.
func IdentityMaster(ctx context.Context, c client.Client, namespace, name string) ([]byte, error) {
	key := client.ObjectKey{Namespace: namespace, Name: name}
	for created := false; ; {
		s := &corev1.Secret{}
		err := c.Get(ctx, key, s)
		if err == nil {
			master, err := hex.DecodeString(string(s.Data[scaling.IdentityMasterField]))
			if err != nil || len(master) != rules.IdentityMasterBytes {
				return nil, fmt.Errorf("secret %s holds no master key (%d hex digits under %q): delete it to have a new one made (docs/install.md, key rotation)",
					key, 2*rules.IdentityMasterBytes, scaling.IdentityMasterField)
			}
			return master, nil
		}
		if !apierrors.IsNotFound(err) || created {
			return nil, fmt.Errorf("reading the identity master key from secret %s: %w", key, err)
		}
		master := make([]byte, rules.IdentityMasterBytes)
		_, _ = rand.Read(master) // never fails (crypto/rand)
		s = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{scaling.LabelManagedBy: "sless"}},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{scaling.IdentityMasterField: []byte(hex.EncodeToString(master))},
		}
		switch err := c.Create(ctx, s); {
		case err == nil:
			return master, nil
		case !apierrors.IsAlreadyExists(err):
			return nil, fmt.Errorf("creating secret %s with a new identity master key: %w", key, err)
		}
		created = true // made by another just now: read theirs
	}
}
