//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
)

// services stands in for kube-proxy and cluster DNS: each Service's ClusterIP goes on lo with
// a listener per port that forwards to a ready endpoint from its EndpointSlices (written by
// kube-controller-manager from real pod readiness), and its DNS names go into the hosts file.
type services struct {
	hosts  *hostsFile
	slices discoverylisters.EndpointSliceLister
	log    *slog.Logger
	mu     sync.Mutex
	ports  map[string]context.CancelFunc // ip:port → listener
	rr     atomic.Uint64
}

func startServices(ctx context.Context, cs kubernetes.Interface, hosts *hostsFile, log *slog.Logger) (*services, error) {
	f := informers.NewSharedInformerFactory(cs, 0)
	s := &services{hosts: hosts, slices: f.Discovery().V1().EndpointSlices().Lister(), log: log.With("component", "services"), ports: map[string]context.CancelFunc{}}
	svcInf := f.Core().V1().Services().Informer()
	_, err := svcInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { s.expose(ctx, o.(*corev1.Service)) },
		UpdateFunc: func(_, o any) { s.expose(ctx, o.(*corev1.Service)) },
		DeleteFunc: func(o any) {
			if svc, ok := o.(*corev1.Service); ok {
				s.close(svc)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	sliceInf := f.Discovery().V1().EndpointSlices().Informer()
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), svcInf.HasSynced, sliceInf.HasSynced) {
		return nil, errors.New("services: informers did not sync")
	}
	return s, nil
}

func (s *services) expose(ctx context.Context, svc *corev1.Service) {
	ip := svc.Spec.ClusterIP
	if ip == "" || ip == corev1.ClusterIPNone {
		return
	}
	if err := addAddress(ip); err != nil {
		s.log.Error("service address", "service", svc.Namespace+"/"+svc.Name, "err", err)
		return
	}
	for _, p := range svc.Spec.Ports {
		addr := net.JoinHostPort(ip, strconv.Itoa(int(p.Port)))
		s.mu.Lock()
		_, open := s.ports[addr]
		if !open {
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				s.mu.Unlock()
				s.log.Error("service listener", "service", svc.Namespace+"/"+svc.Name, "addr", addr, "err", err)
				continue
			}
			lctx, cancel := context.WithCancel(ctx)
			s.ports[addr] = cancel
			ns, name, portName := svc.Namespace, svc.Name, p.Name
			go forward(lctx, ln, func() (net.Conn, error) { return s.dialEndpoint(ns, name, portName) })
		}
		s.mu.Unlock()
	}
	n := svc.Name + "." + svc.Namespace
	if err := s.hosts.set(ip, n, n+".svc", n+".svc.cluster.local"); err != nil {
		s.log.Error("hosts file", "err", err)
	}
}

func (s *services) close(svc *corev1.Service) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range svc.Spec.Ports {
		addr := net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(p.Port)))
		if cancel, ok := s.ports[addr]; ok {
			cancel()
			delete(s.ports, addr)
		}
	}
}

// dialEndpoint connects to one ready endpoint of the Service, round robin. This proxy accepts
// the caller's connection before it picks an endpoint, so it also stands in for what a refused
// dial costs through kube-proxy: the caller (the interceptor) retries it and the new SYN may
// land on another pod — here a refused endpoint is retried with the others. Callers that
// watch EndpointSlices themselves may also see a pod ready a moment before this proxy's
// informer does; like kube-proxy's rule sync, that gap is bridged by waiting briefly.
func (s *services) dialEndpoint(ns, name, portName string) (net.Conn, error) {
	deadline := time.Now().Add(3 * time.Second)
	var lastErr error
	for {
		targets, err := s.endpoints(ns, name, portName)
		if err != nil {
			return nil, err
		}
		if len(targets) > 0 {
			c, err := net.DialTimeout("tcp", targets[s.rr.Add(1)%uint64(len(targets))], 5*time.Second)
			if err == nil {
				return c, nil
			}
			lastErr = err
		}
		if time.Now().After(deadline) {
			if lastErr != nil {
				return nil, fmt.Errorf("service %s/%s: %w", ns, name, lastErr)
			}
			return nil, fmt.Errorf("service %s/%s has no ready endpoints", ns, name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// endpoints lists the ready addresses of the Service's port.
func (s *services) endpoints(ns, name, portName string) ([]string, error) {
	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: name})
	slices, err := s.slices.EndpointSlices(ns).List(sel)
	if err != nil {
		return nil, err
	}
	var targets []string
	for _, sl := range slices {
		port := int32(0)
		for _, p := range sl.Ports {
			if p.Port != nil && (p.Name == nil && portName == "" || p.Name != nil && *p.Name == portName) {
				port = *p.Port
			}
		}
		if port == 0 {
			continue
		}
		for _, ep := range sl.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, a := range ep.Addresses {
				targets = append(targets, net.JoinHostPort(a, strconv.Itoa(int(port))))
			}
		}
	}
	return targets, nil
}

// timeline records when things happened to named objects, for the cold-start split.
type timeline struct {
	mu sync.Mutex
	at map[string]map[string]time.Time
}

func newTimeline() *timeline { return &timeline{at: map[string]map[string]time.Time{}} }

// mark records the first time what happened to key.
func (t *timeline) mark(key, what string, when time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.at[key]
	if m == nil {
		m = map[string]time.Time{}
		t.at[key] = m
	}
	if _, ok := m[what]; !ok {
		m[what] = when
	}
}

// get returns a copy of the marks recorded for key.
func (t *timeline) get(key string) map[string]time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]time.Time{}
	for k, v := range t.at[key] {
		out[k] = v
	}
	return out
}
