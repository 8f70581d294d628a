//go:build e2e

package e2e

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// The HPA's path to KEDA's metrics: kube-controller-manager's HPA controller asks the API
// server for external.metrics.k8s.io, the aggregation layer proxies it to KEDA's metrics API
// server (keda-operator-metrics-apiserver, cmd/adapter of the same module as the operator),
// which asks the operator over gRPC, which asks the add-on's scaler.
const (
	adapterPort        = 19120
	adapterMetricsPort = 19121
	externalMetricsAPI = "v1beta1.external.metrics.k8s.io"
)

// configureAggregation turns on the API server's aggregation layer: the front proxy's client
// certificate and the CA the extension API servers check it with, and routing to an
// APIService's endpoints rather than a Service IP (there is no kube-proxy here).
func (g *ground) configureAggregation(api *envtest.APIServer) error {
	dir := filepath.Join(g.dir, "front-proxy")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ca, err := newTestCA("front-proxy-ca")
	if err != nil {
		return err
	}
	crt, key, err := ca.issue("front-proxy-client", nil, nil)
	if err != nil {
		return err
	}
	for n, b := range map[string][]byte{"ca.crt": ca.pem, "client.crt": crt, "client.key": key} {
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o600); err != nil {
			return err
		}
	}
	api.Configure().
		Set("requestheader-client-ca-file", filepath.Join(dir, "ca.crt")).
		Set("requestheader-allowed-names", "front-proxy-client").
		Set("requestheader-username-headers", "X-Remote-User").
		Set("requestheader-group-headers", "X-Remote-Group").
		Set("requestheader-extra-headers-prefix", "X-Remote-Extra-").
		Set("proxy-client-cert-file", filepath.Join(dir, "client.crt")).
		Set("proxy-client-key-file", filepath.Join(dir, "client.key")).
		Set("enable-aggregator-routing", "true")
	return nil
}

// startMetricsAdapter runs KEDA's metrics API server, registers it as the external metrics
// APIService and waits until the aggregator reports it Available.
func (g *ground) startMetricsAdapter(ctx context.Context) error {
	const name = "keda-operator-metrics-apiserver"
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "keda"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt32(adapterPort)}}}}
	if err := g.client.Create(ctx, svc); err != nil {
		return err
	}
	// Endpoints (the EndpointSlice mirroring controller makes the slice): the aggregator
	// resolves an APIService's service to an endpoint address.
	ep := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "keda"}, //nolint:staticcheck // the aggregator's resolver input
		Subsets: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: nodeIP}}, //nolint:staticcheck
			Ports: []corev1.EndpointPort{{Name: "https", Port: adapterPort}}}}} //nolint:staticcheck
	if err := g.client.Create(ctx, ep); err != nil {
		return err
	}
	certs := filepath.Join(g.dir, "keda-certs")
	if err := g.spawn("keda-metrics-apiserver", []string{"POD_NAMESPACE=keda", "KEDA_CLUSTER_OBJECT_NAMESPACE=keda", "WATCH_NAMESPACE="},
		filepath.Join(g.tools["keda"], "keda-adapter"), "--secure-port="+strconv.Itoa(adapterPort), "--bind-address="+nodeIP,
		"--cert-dir="+certs, "--tls-cert-file="+filepath.Join(certs, "tls.crt"), "--tls-private-key-file="+filepath.Join(certs, "tls.key"),
		"--authentication-kubeconfig="+g.kubeconfig, "--authorization-kubeconfig="+g.kubeconfig, "--lister-kubeconfig="+g.kubeconfig,
		"--metrics-service-address="+net.JoinHostPort("127.0.0.1", strconv.Itoa(kedaMetricsSvcPort)),
		"--port="+strconv.Itoa(adapterMetricsPort)); err != nil {
		return err
	}
	apiService := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": externalMetricsAPI},
		"spec": map[string]any{"group": "external.metrics.k8s.io", "version": "v1beta1", "groupPriorityMinimum": int64(100),
			"versionPriority": int64(100), "insecureSkipTLSVerify": true,
			"service": map[string]any{"name": name, "namespace": "keda", "port": int64(443)}},
	}}
	if err := g.client.Create(ctx, apiService); err != nil {
		return err
	}
	return g.poll(ctx, 2*time.Minute, "APIService "+externalMetricsAPI+" Available", func() bool {
		var got unstructured.Unstructured
		got.SetAPIVersion("apiregistration.k8s.io/v1")
		got.SetKind("APIService")
		if err := g.client.Get(ctx, client.ObjectKey{Name: externalMetricsAPI}, &got); err != nil {
			return false
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Available" && m["status"] == "True" {
				return true
			}
		}
		return false
	})
}
