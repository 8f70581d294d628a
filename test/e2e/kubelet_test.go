//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// kubelet is the one stand-in on the test ground: it schedules pods onto its node (there is
// no kube-scheduler), pulls each container's image from the registry and runs it from the
// image's filesystem in a network namespace of the pod's own (runtime_test.go), probes
// readiness, and writes pod status the way the real kubelet does, so Deployments,
// ReplicaSets, EndpointSlices, Jobs, KEDA and the interceptor see real pod lifecycles.
type kubelet struct {
	cs   kubernetes.Interface
	node string
	// ip is the node's address (its kubelet API listens there); pods get addresses from
	// 10.<podNet>.0.0/16, the node's own range.
	ip     string
	podNet int
	rt     *runtime
	env    nodeEnv
	dir    string
	log    *slog.Logger
	marks  *timeline
	mu     sync.Mutex
	pods   map[types.UID]*podRun
	nextIP int
	// started is when the kubelet started: its PLEG relists from then.
	started time.Time
	// openLogs are the container logs still being written (followers wait on them).
	openLogs map[string]bool
}

// nodeEnv is what every container gets from the node: the cluster's hosts file (its DNS
// here; the kubelet adds each pod's own name), a resolv.conf with no server to wait for, and
// the API server's address and CA for in-cluster clients.
type nodeEnv struct {
	hosts            *hostsFile
	resolvConf       string
	apiHost, apiPort string
	apiCA            []byte
}

type podRun struct {
	cancel context.CancelFunc
	done   chan struct{}
	stopMu sync.Mutex
	c      *imageProcess
	grace  time.Duration
	// admitted is when the kubelet took the pod up: its probe workers tick from then.
	admitted time.Time
}

// nodeIP is the host's address on the node network: the first node's, and where the
// platform's own processes (the API server, S3, the registry's neighbours) listen. The nodes
// share the host's network namespace; each has an address and a pod range of its own.
const nodeIP = "10.244.0.1"

// nodeCount process kubelets register as nodes; the real kube-scheduler spreads pods over them.
const nodeCount = 3

// nodeAddress is node i's address and podNet its pod range's second octet.
func nodeAddress(i int) (ip string, podNet int) {
	if i == 0 {
		return nodeIP, 245
	}
	return fmt.Sprintf("10.244.0.%d", 10+i), 245 + i
}

// Image pull back-off: the kubelet's doubles from 10 s to 5 min; shorter here so a test sees
// a registry come back within seconds.
const (
	pullBackoff    = time.Second
	maxPullBackoff = 8 * time.Second
)

// newKubelet is node i's kubelet. Nodes share the container runtime (one host) and the
// directory of pod logs (pods are told apart by UID).
func newKubelet(cs kubernetes.Interface, i int, dir string, rt *runtime, env nodeEnv, marks *timeline, log *slog.Logger) *kubelet {
	name := fmt.Sprintf("e2e-node-%d", i+1)
	ip, podNet := nodeAddress(i)
	return &kubelet{cs: cs, node: name, ip: ip, podNet: podNet, rt: rt, env: env, dir: dir,
		log: log.With("component", "kubelet", "node", name), marks: marks,
		pods: map[types.UID]*podRun{}, nextIP: 10, openLogs: map[string]bool{}, started: time.Now()}
}

// start registers the node and handles pods until ctx ends.
func (k *kubelet) start(ctx context.Context) error {
	if err := addAddress(k.ip); err != nil {
		return err
	}
	if err := k.serveAPI(ctx); err != nil {
		return err
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: k.node, Labels: map[string]string{"kubernetes.io/hostname": k.node, "kubernetes.io/os": "linux"}},
		Spec:       corev1.NodeSpec{PodCIDR: fmt.Sprintf("10.%d.0.0/16", k.podNet), PodCIDRs: []string{fmt.Sprintf("10.%d.0.0/16", k.podNet)}},
	}
	if _, err := k.cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("registering node: %w", err)
	}
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi"), corev1.ResourcePods: resource.MustParse("500")}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := k.cs.CoreV1().Nodes().Get(ctx, k.node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Status = corev1.NodeStatus{
			Capacity: capacity, Allocatable: capacity,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}},
			Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: k.ip}, {Type: corev1.NodeHostName, Address: k.node}},
			DaemonEndpoints: kubeletEndpoint(),
		}
		_, err = k.cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("node status: %w", err)
	}
	// The API server taints a new node not-ready (TaintNodesByCondition); the node lifecycle
	// controller lifts it once the node reports Ready. That controller is off (the stand-in
	// sends no heartbeats), so the kubelet lifts it, or kube-scheduler would bind nothing.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := k.cs.CoreV1().Nodes().Get(ctx, k.node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		taints := slices.DeleteFunc(slices.Clone(n.Spec.Taints), func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeNotReady })
		if len(taints) == len(n.Spec.Taints) {
			return nil
		}
		n.Spec.Taints = taints
		_, err = k.cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("node taints: %w", err)
	}
	f := informers.NewSharedInformerFactory(k.cs, 0)
	inf := f.Core().V1().Pods().Informer()
	_, err = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { k.sync(ctx, o.(*corev1.Pod)) },
		UpdateFunc: func(_, o any) { k.sync(ctx, o.(*corev1.Pod)) },
		DeleteFunc: func(o any) {
			if p, ok := o.(*corev1.Pod); ok {
				k.stopPod(p.UID)
			}
		},
	})
	if err != nil {
		return err
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return errors.New("kubelet: pod informer did not sync")
	}
	return nil
}

// sync moves one pod towards what its spec asks for. Handlers run on the informer's
// goroutine, so anything slow happens in the pod's own goroutine.
func (k *kubelet) sync(ctx context.Context, p *corev1.Pod) {
	switch {
	case p.Spec.NodeName != k.node: // another node's, or not scheduled yet (kube-scheduler binds)
	case p.DeletionTimestamp != nil:
		go k.terminate(ctx, p)
	case p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
	default:
		k.mu.Lock()
		_, known := k.pods[p.UID]
		if !known {
			runCtx, cancel := context.WithCancel(ctx)
			r := &podRun{cancel: cancel, done: make(chan struct{}), grace: 30 * time.Second, admitted: time.Now()}
			if g := p.Spec.TerminationGracePeriodSeconds; g != nil {
				r.grace = time.Duration(*g) * time.Second
			}
			k.pods[p.UID] = r
			go k.runPod(runCtx, p.DeepCopy(), r)
		}
		k.mu.Unlock()
	}
}

// terminate stops a pod being deleted and then removes it for good, as the kubelet does
// after the grace period.
func (k *kubelet) terminate(ctx context.Context, p *corev1.Pod) {
	// The preStop hook runs before SIGTERM, as the real kubelet runs it (sleep is the only
	// action sless renders).
	if l := p.Spec.Containers[0].Lifecycle; l != nil && l.PreStop != nil && l.PreStop.Sleep != nil {
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(l.PreStop.Sleep.Seconds) * time.Second):
		}
	}
	k.stopPod(p.UID)
	err := k.cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0)), Preconditions: &metav1.Preconditions{UID: &p.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		k.log.Warn("final pod delete failed", "pod", p.Namespace+"/"+p.Name, "err", err)
	}
}

func (k *kubelet) stopPod(uid types.UID) {
	k.mu.Lock()
	r := k.pods[uid]
	k.mu.Unlock()
	if r == nil {
		return
	}
	// Cancel first so runPod does not restart what is being stopped.
	r.cancel()
	r.stopMu.Lock()
	c := r.c
	r.stopMu.Unlock()
	if c != nil {
		c.stop(r.grace)
	}
	<-r.done
}

// stopAll ends every pod's containers (the ground is going down).
func (k *kubelet) stopAll() {
	k.mu.Lock()
	uids := make([]types.UID, 0, len(k.pods))
	for uid := range k.pods {
		uids = append(uids, uid)
	}
	k.mu.Unlock()
	var wg sync.WaitGroup
	for _, uid := range uids {
		wg.Add(1)
		go func() { defer wg.Done(); k.stopPod(uid) }()
	}
	wg.Wait()
}

func (k *kubelet) allocIP() (string, error) {
	k.mu.Lock()
	// Never reused: a stale EndpointSlice entry must not reach another pod.
	if k.nextIP > 250*250 {
		k.mu.Unlock()
		return "", errors.New("kubelet: pod addresses exhausted")
	}
	ip := fmt.Sprintf("10.%d.%d.%d", k.podNet, k.nextIP/250, 1+k.nextIP%250)
	k.nextIP++
	k.mu.Unlock()
	return ip, nil
}

// runPod runs the pod's init containers, then its single container (sless renders no pod with
// more), restarting it under restartPolicy Always, and keeps the pod's status current.
func (k *kubelet) runPod(ctx context.Context, p *corev1.Pod, r *podRun) {
	defer close(r.done)
	key := p.Namespace + "/" + p.Name
	log := k.log.With("pod", key)
	ip, err := k.allocIP()
	if err != nil {
		log.Error("no address for pod", "err", err)
		return
	}
	dir := filepath.Join(k.dir, string(p.UID))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		log.Error("pod directory", "err", err)
		return
	}
	if !k.runInit(ctx, p, ip, dir, r) {
		return
	}
	c := &p.Spec.Containers[0]
	restarts := int32(0)
	for {
		exit, msg, started := k.runContainer(ctx, p, c, ip, dir, restarts, r)
		if ctx.Err() != nil {
			return
		}
		never := p.Spec.RestartPolicy == corev1.RestartPolicyNever || (p.Spec.RestartPolicy == corev1.RestartPolicyOnFailure && exit == 0)
		term := &corev1.ContainerStateTerminated{ExitCode: int32(exit), Message: msg, Reason: "Completed", StartedAt: started, FinishedAt: metav1.Now()}
		if exit != 0 {
			term.Reason = "Error"
		}
		phase := corev1.PodRunning
		if never {
			phase = corev1.PodSucceeded
			if exit != 0 {
				phase = corev1.PodFailed
			}
		}
		k.setStatus(ctx, p, func(st *corev1.PodStatus) {
			st.Phase = phase
			setPodReady(st, false)
			cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, RestartCount: restarts, State: corev1.ContainerState{Terminated: term}}
			if !never { // waiting to be restarted, as the kubelet reports a crashing container
				cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
					Message: fmt.Sprintf("back-off restarting failed container %s (exit code %d)", c.Name, exit)}}
				cs.LastTerminationState = corev1.ContainerState{Terminated: term}
			}
			putStatus(st, p, cs)
		})
		log.Info("container exited", "exit", exit, "restartPolicy", p.Spec.RestartPolicy)
		if never {
			return
		}
		restarts++
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// runInit runs p's init containers one after another to completion, as the kubelet does before
// the pod's containers, the pod Pending meanwhile; the first that fails fails the pod (sless
// renders init containers only with restartPolicy Never: a build's steps). It reports whether
// the pod's containers may start.
func (k *kubelet) runInit(ctx context.Context, p *corev1.Pod, ip, dir string, r *podRun) bool {
	if len(p.Spec.InitContainers) == 0 {
		return true
	}
	initializing := func(c corev1.Container) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: c.Name, Image: c.Image,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}
	}
	k.setStatus(ctx, p, func(st *corev1.PodStatus) {
		st.Phase = corev1.PodPending
		setCondition(st, corev1.PodInitialized, false)
		for _, c := range append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...) {
			putStatus(st, p, initializing(c))
		}
	})
	for i := range p.Spec.InitContainers {
		c := &p.Spec.InitContainers[i]
		exit, msg, started := k.runContainer(ctx, p, c, ip, dir, 0, r)
		if ctx.Err() != nil {
			return false
		}
		term := &corev1.ContainerStateTerminated{ExitCode: int32(exit), Message: msg, Reason: "Completed", StartedAt: started, FinishedAt: metav1.Now()}
		if exit != 0 {
			term.Reason = "Error"
		}
		k.setStatus(ctx, p, func(st *corev1.PodStatus) {
			putStatus(st, p, corev1.ContainerStatus{Name: c.Name, Image: c.Image, State: corev1.ContainerState{Terminated: term}})
			if exit != 0 {
				st.Phase = corev1.PodFailed
			}
		})
		k.log.Info("init container exited", "pod", p.Namespace+"/"+p.Name, "container", c.Name, "exit", exit)
		if exit != 0 {
			return false
		}
	}
	return true
}

// putStatus puts cs in place of the status of its container in st, among the init
// containers' or the containers' as cs's container is one or the other.
func putStatus(st *corev1.PodStatus, p *corev1.Pod, cs corev1.ContainerStatus) {
	list := &st.ContainerStatuses
	if slices.ContainsFunc(p.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == cs.Name }) {
		list = &st.InitContainerStatuses
	}
	if i := slices.IndexFunc(*list, func(s corev1.ContainerStatus) bool { return s.Name == cs.Name }); i >= 0 {
		(*list)[i] = cs
		return
	}
	*list = append(*list, cs)
}

// initContainer tells whether c is one of p's init containers.
func initContainer(p *corev1.Pod, c *corev1.Container) bool {
	return slices.ContainsFunc(p.Spec.InitContainers, func(ic corev1.Container) bool { return ic.Name == c.Name })
}

// runContainer starts c once and returns its exit code, termination message and start time.
func (k *kubelet) runContainer(ctx context.Context, p *corev1.Pod, c *corev1.Container, ip, dir string, restarts int32, r *podRun) (int, string, metav1.Time) {
	key := p.Namespace + "/" + p.Name
	img, ok := k.pullWithBackoff(ctx, p, c, restarts)
	if !ok {
		return 1, "", metav1.Now()
	}
	termPath := filepath.Join(dir, "termination-log-"+c.Name)
	logPath := filepath.Join(dir, fmt.Sprintf("%s_%s_%s-%d.log", p.Namespace, p.Name, c.Name, restarts))
	logf, err := os.Create(logPath)
	var spec containerSpec
	var cl *containerLog
	if err == nil {
		k.setLogOpen(logPath, true)
		defer k.setLogOpen(logPath, false)
		defer logf.Close()
		spec, err = k.containerSpec(ctx, p, c, img, ip, dir, termPath)
	}
	var run *imageProcess
	if err == nil {
		cl = &containerLog{f: logf}
		run, err = k.rt.start(spec, ip, cl.stream("stdout"), cl.stream("stderr"))
	}
	if err != nil {
		k.log.Warn("container cannot start", "pod", key, "err", err)
		k.setStatus(ctx, p, func(st *corev1.PodStatus) {
			st.Phase = corev1.PodPending
			putStatus(st, p, corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: img.ref, RestartCount: restarts,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: err.Error()}}})
		})
		<-ctx.Done()
		return 1, err.Error(), metav1.Now()
	}
	r.stopMu.Lock()
	r.c = run
	r.stopMu.Unlock()
	if ctx.Err() != nil { // stopPod ran while this container was starting
		run.stop(r.grace)
	}
	started := metav1.Now()
	k.marks.mark(key, "started", started.Time)
	ready := c.ReadinessProbe == nil
	init := initContainer(p, c)
	k.setStatus(ctx, p, func(st *corev1.PodStatus) {
		st.HostIP, st.PodIP = k.ip, ip
		st.HostIPs, st.PodIPs = []corev1.HostIP{{IP: k.ip}}, []corev1.PodIP{{IP: ip}}
		if st.StartTime == nil {
			st.StartTime = &started
		}
		setCondition(st, corev1.PodScheduled, true)
		running := corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: img.ref, RestartCount: restarts,
			Started: ptr.To(true), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}}
		if init { // the pod stays Pending until its init containers are done
			putStatus(st, p, running)
			return
		}
		st.Phase = corev1.PodRunning
		setCondition(st, corev1.PodInitialized, true)
		putStatus(st, p, running)
		setPodReady(st, ready)
	})
	exited := make(chan int, 1)
	go func() { exited <- run.wait() }()
	probeCtx, stopProbe := context.WithCancel(ctx)
	if c.ReadinessProbe != nil {
		go k.probe(probeCtx, p, c, ip, k.firstProbe(r.admitted, started.Time, c.ReadinessProbe))
	}
	exit := <-exited
	cl.flush()
	stopProbe()
	return exit, terminationMessage(c, termPath, logPath, exit), started
}

// pullWithBackoff makes c's image present, reporting ErrImagePull and then ImagePullBackOff
// in the pod's status while the registry refuses, and retrying with a doubling delay. It
// returns false when the pod went away first.
func (k *kubelet) pullWithBackoff(ctx context.Context, p *corev1.Pod, c *corev1.Container, restarts int32) (*pulledImage, bool) {
	key := p.Namespace + "/" + p.Name
	k.marks.mark(key, "pulling", time.Now())
	wait := pullBackoff
	for {
		img, fetched, err := k.rt.pull(ctx, c.Image)
		if err == nil {
			k.marks.mark(key, "pulled", time.Now())
			if fetched {
				k.marks.mark(key, "fetched", time.Now())
			}
			return img, true
		}
		if ctx.Err() != nil {
			return nil, false
		}
		k.log.Warn("image pull failed", "pod", key, "image", c.Image, "err", err)
		for _, reason := range []string{"ErrImagePull", "ImagePullBackOff"} {
			k.setStatus(ctx, p, func(st *corev1.PodStatus) {
				st.Phase = corev1.PodPending
				putStatus(st, p, corev1.ContainerStatus{Name: c.Name, Image: c.Image, RestartCount: restarts,
					State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: err.Error()}}})
			})
			select {
			case <-ctx.Done():
				return nil, false
			case <-time.After(wait / 2):
			}
		}
		wait = min(2*wait, maxPullBackoff)
	}
}

// containerSpec resolves what runs: the image's user unless the pod's security context
// says otherwise (and never root under runAsNonRoot), the image's environment overridden by
// the container's, the image's or container's working directory and command, and the
// kubelet's mounts (hosts file, termination log, service account token).
func (k *kubelet) containerSpec(ctx context.Context, p *corev1.Pod, c *corev1.Container, img *pulledImage, ip, dir, termPath string) (containerSpec, error) {
	volumes, err := k.volumes(ctx, p, c, dir)
	if err != nil {
		return containerSpec{}, err
	}
	uid, gid, err := imageUser(img.config.User)
	if err != nil {
		return containerSpec{}, err
	}
	var groups []int
	nonRoot := false
	for _, sc := range []*corev1.SecurityContext{podSecurity(p), c.SecurityContext} {
		if sc == nil {
			continue
		}
		if sc.RunAsUser != nil {
			uid = int(*sc.RunAsUser)
		}
		if sc.RunAsGroup != nil {
			gid = int(*sc.RunAsGroup)
		}
		nonRoot = nonRoot || ptr.Deref(sc.RunAsNonRoot, false)
	}
	if nonRoot && uid == 0 {
		return containerSpec{}, errors.New("container has runAsNonRoot and image will run as root")
	}
	if psc := p.Spec.SecurityContext; psc != nil {
		if psc.FSGroup != nil {
			groups = append(groups, int(*psc.FSGroup))
		}
		for _, g := range psc.SupplementalGroups {
			groups = append(groups, int(g))
		}
	}
	env, err := k.containerEnv(ctx, p, c, img.config.Env)
	if err != nil {
		return containerSpec{}, err
	}
	vals := map[string]string{}
	for _, kv := range env {
		n, v, _ := strings.Cut(kv, "=")
		vals[n] = v
	}
	args, err := argv(c.Command, c.Args, img.config, vals)
	if err != nil {
		return containerSpec{}, err
	}
	workdir := c.WorkingDir
	if workdir == "" {
		workdir = img.config.WorkingDir
	}
	if workdir == "" {
		workdir = "/"
	}
	if err := os.WriteFile(termPath, nil, 0o666); err != nil {
		return containerSpec{}, err
	}
	_ = os.Chmod(termPath, 0o666) // writable by the container's user, whoever it is
	msgPath := c.TerminationMessagePath
	if msgPath == "" {
		msgPath = corev1.TerminationMessagePathDefault
	}
	// As the kubelet's /etc/hosts, the pod's own name resolves to its address.
	if err := k.env.hosts.set(ip, p.Name); err != nil {
		return containerSpec{}, err
	}
	mounts := []bindMount{{Source: k.env.hosts.path, Target: "/etc/hosts", ReadOnly: true},
		{Source: k.env.resolvConf, Target: "/etc/resolv.conf", ReadOnly: true}, {Source: termPath, Target: msgPath}}
	if sa, err := k.serviceAccount(ctx, p, dir); err != nil {
		return containerSpec{}, err
	} else if sa != "" {
		mounts = append(mounts, bindMount{Source: sa, Target: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true})
	}
	return containerSpec{Lower: img.rootfs, Argv: args, Env: env, UID: uid, GID: gid, Groups: groups, Dir: workdir,
		Hostname: p.Name, ReadOnlyRoot: c.SecurityContext != nil && ptr.Deref(c.SecurityContext.ReadOnlyRootFilesystem, false),
		Mounts: append(mounts, volumes...)}, nil
}

// volumes mounts the container's volumes as the kubelet does. A Secret volume is a file per
// key (or per item), its mode the volume's defaultMode (0644 when unset), owned by root and
// the pod's fsGroup when it has one, shown read-only at the mount path; a missing Secret fails
// the start, as a real kubelet keeps the pod in ContainerCreating. A hostPath volume of type
// Directory is the host's directory, which must exist. An emptyDir is a directory of the
// pod's (mode 0777, as the kubelet makes it) that every container of the pod shares for the
// pod's life. Any other kind of volume fails loudly: a build Job's registry credentials, say,
// must not silently go missing.
func (k *kubelet) volumes(ctx context.Context, p *corev1.Pod, c *corev1.Container, dir string) ([]bindMount, error) {
	var mounts []bindMount
	for _, vm := range c.VolumeMounts {
		i := slices.IndexFunc(p.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == vm.Name })
		if i >= 0 && p.Spec.Volumes[i].HostPath != nil {
			hp := p.Spec.Volumes[i].HostPath
			if ptr.Deref(hp.Type, "") != corev1.HostPathDirectory {
				return nil, fmt.Errorf("volume %s: only hostPath volumes of type Directory are supported by the e2e kubelet", vm.Name)
			}
			if fi, err := os.Stat(hp.Path); err != nil || !fi.IsDir() {
				return nil, fmt.Errorf("MountVolume.SetUp failed for volume %q: hostPath type check failed: %s is not a directory", vm.Name, hp.Path)
			}
			mounts = append(mounts, bindMount{Source: hp.Path, Target: vm.MountPath, ReadOnly: vm.ReadOnly})
			continue
		}
		if i >= 0 && p.Spec.Volumes[i].EmptyDir != nil {
			vdir := filepath.Join(dir, "empty-dirs", vm.Name)
			if err := os.MkdirAll(vdir, 0o777); err != nil {
				return nil, err
			}
			if err := os.Chmod(vdir, 0o777); err != nil { // past the umask
				return nil, err
			}
			mounts = append(mounts, bindMount{Source: vdir, Target: vm.MountPath, ReadOnly: vm.ReadOnly})
			continue
		}
		if i < 0 || p.Spec.Volumes[i].Secret == nil {
			return nil, fmt.Errorf("volume %s: only Secret, hostPath and emptyDir volumes are supported by the e2e kubelet", vm.Name)
		}
		src := p.Spec.Volumes[i].Secret
		s, err := k.cs.CoreV1().Secrets(p.Namespace).Get(ctx, src.SecretName, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("MountVolume.SetUp failed for volume %q: %w", vm.Name, err)
		}
		vdir := filepath.Join(dir, "volumes", vm.Name)
		if err := os.RemoveAll(vdir); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			return nil, err
		}
		gid := 0
		if psc := p.Spec.SecurityContext; psc != nil && psc.FSGroup != nil {
			gid = int(*psc.FSGroup)
		}
		items := src.Items
		if len(items) == 0 {
			for _, key := range slices.Sorted(maps.Keys(s.Data)) {
				items = append(items, corev1.KeyToPath{Key: key, Path: key})
			}
		}
		for _, it := range items {
			mode := os.FileMode(ptr.Deref(it.Mode, ptr.Deref(src.DefaultMode, 0o644)))
			path := filepath.Join(vdir, it.Path)
			if err := os.WriteFile(path, s.Data[it.Key], mode); err != nil {
				return nil, err
			}
			if err := os.Chmod(path, mode); err != nil { // past the umask
				return nil, err
			}
			if err := os.Chown(path, 0, gid); err != nil {
				return nil, err
			}
		}
		mounts = append(mounts, bindMount{Source: vdir, Target: vm.MountPath, ReadOnly: true})
	}
	return mounts, nil
}

// podSecurity is the part of the pod's security context a container's may override.
func podSecurity(p *corev1.Pod) *corev1.SecurityContext {
	psc := p.Spec.SecurityContext
	if psc == nil {
		return nil
	}
	return &corev1.SecurityContext{RunAsUser: psc.RunAsUser, RunAsGroup: psc.RunAsGroup, RunAsNonRoot: psc.RunAsNonRoot}
}

// serviceAccount writes the pod's projected service account token (TokenRequest, bound to
// the pod), the API server's CA and the namespace, unless the pod opts out; it returns the
// directory to mount, or "".
func (k *kubelet) serviceAccount(ctx context.Context, p *corev1.Pod, dir string) (string, error) {
	if !ptr.Deref(p.Spec.AutomountServiceAccountToken, true) {
		return "", nil
	}
	sa := p.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	tr, err := k.cs.CoreV1().ServiceAccounts(p.Namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To(int64(3600)),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for service account %s/%s: %w", p.Namespace, sa, err)
	}
	out := filepath.Join(dir, "serviceaccount")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", err
	}
	for name, data := range map[string][]byte{"token": []byte(tr.Status.Token), "ca.crt": k.env.apiCA, "namespace": []byte(p.Namespace)} {
		if err := os.WriteFile(filepath.Join(out, name), data, 0o644); err != nil {
			return "", err
		}
	}
	return out, nil
}

// probe runs c's HTTP readiness probe like the kubelet: the first probe right away, then
// every periodSeconds; Ready flips after successThreshold successes or failureThreshold
// failures.
// plegPeriod is the real kubelet's generic PLEG relist period: how late it notices that a
// container started.
const plegPeriod = time.Second

// firstProbe is when the real kubelet first probes the readiness of a container started at
// started: its probe worker ticks every period from the pod's admission (probing nothing
// while no container runs), and the pod sync that follows the PLEG's next relist after the
// start triggers a probe at once (prober_manager.go UpdatePodStatus → manualTriggerCh).
// Whichever comes first; initialDelaySeconds still holds the probe back.
func (k *kubelet) firstProbe(admitted, started time.Time, pr *corev1.Probe) time.Time {
	next := func(origin time.Time, every time.Duration) time.Time {
		n := started.Sub(origin)/every + 1
		return origin.Add(n * every)
	}
	first := next(admitted, time.Duration(max(pr.PeriodSeconds, 1))*time.Second)
	if relist := next(k.started, plegPeriod); relist.Before(first) {
		first = relist
	}
	if delayed := started.Add(time.Duration(pr.InitialDelaySeconds) * time.Second); delayed.After(first) {
		first = delayed
	}
	return first
}

func (k *kubelet) probe(ctx context.Context, p *corev1.Pod, c *corev1.Container, ip string, first time.Time) {
	pr := c.ReadinessProbe
	period := time.Duration(max(pr.PeriodSeconds, 1)) * time.Second
	timeout := time.Duration(max(pr.TimeoutSeconds, 1)) * time.Second
	// check is one probe as the kubelet's prober runs it: an HTTP GET answered 200–399, or a
	// TCP connection accepted (and closed at once).
	var check func() bool
	switch {
	case pr.HTTPGet != nil:
		url := fmt.Sprintf("http://%s:%d%s", ip, containerPort(c, pr.HTTPGet.Port), pr.HTTPGet.Path)
		client := &http.Client{Timeout: timeout}
		check = func() bool {
			resp, err := client.Get(url)
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode >= 200 && resp.StatusCode < 400
		}
	case pr.TCPSocket != nil:
		addr := net.JoinHostPort(ip, strconv.Itoa(containerPort(c, pr.TCPSocket.Port)))
		check = func() bool {
			conn, err := net.DialTimeout("tcp", addr, timeout)
			if err != nil {
				return false
			}
			conn.Close()
			return true
		}
	default:
		return
	}
	ready, fails := false, 0
	select {
	case <-ctx.Done():
		return
	case <-time.After(time.Until(first)):
	}
	for {
		ok := check()
		switch {
		case ok && !ready:
			ready, fails = true, 0
			k.marks.mark(p.Namespace+"/"+p.Name, "ready", time.Now())
			k.setStatus(ctx, p, func(st *corev1.PodStatus) { setPodReady(st, true) })
		case ok:
			fails = 0
		case ready:
			if fails++; fails >= int(max(pr.FailureThreshold, 1)) {
				ready = false
				k.setStatus(ctx, p, func(st *corev1.PodStatus) { setPodReady(st, false) })
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(period):
		}
	}
}

// containerPort resolves a probe's port, a number or the name of one of c's ports.
func containerPort(c *corev1.Container, port intstr.IntOrString) int {
	if n := port.IntValue(); n != 0 {
		return n
	}
	for _, cp := range c.Ports {
		if cp.Name == port.StrVal {
			return int(cp.ContainerPort)
		}
	}
	return 0
}

// containerEnv resolves the container's environment the way the kubelet does: the image's,
// then envFrom (Secrets, ConfigMaps), then env (literal values, references, the downward
// API), later names overriding earlier ones; plus HOSTNAME and the API server's address.
func (k *kubelet) containerEnv(ctx context.Context, p *corev1.Pod, c *corev1.Container, image []string) ([]string, error) {
	vals := map[string]string{}
	var order []string
	set := func(n, v string) {
		if _, ok := vals[n]; !ok {
			order = append(order, n)
		}
		vals[n] = v
	}
	for _, kv := range image {
		n, v, _ := strings.Cut(kv, "=")
		set(n, v)
	}
	set("HOSTNAME", p.Name)
	set("KUBERNETES_SERVICE_HOST", k.env.apiHost)
	set("KUBERNETES_SERVICE_PORT", k.env.apiPort)
	for _, ef := range c.EnvFrom {
		data, err := k.envSource(ctx, p.Namespace, ef)
		if err != nil {
			return nil, err
		}
		for kk, v := range data {
			set(ef.Prefix+kk, v)
		}
	}
	for _, e := range c.Env {
		v, skip, err := k.envValue(ctx, p, e)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		if !skip {
			set(e.Name, v)
		}
	}
	env := make([]string, 0, len(order))
	for _, n := range order {
		env = append(env, n+"="+vals[n])
	}
	return env, nil
}

// envSource reads the Secret or ConfigMap of one envFrom entry (nil when optional and
// missing).
func (k *kubelet) envSource(ctx context.Context, ns string, ef corev1.EnvFromSource) (map[string]string, error) {
	var data map[string]string
	var err error
	switch {
	case ef.SecretRef != nil:
		data, err = k.sourceData(ctx, ns, true, ef.SecretRef.Name, ef.SecretRef.Optional)
	case ef.ConfigMapRef != nil:
		data, err = k.sourceData(ctx, ns, false, ef.ConfigMapRef.Name, ef.ConfigMapRef.Optional)
	default:
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w for envFrom", err)
	}
	return data, nil
}

// sourceData reads the data of the Secret (secret) or ConfigMap name; nil when it is missing
// and optional.
func (k *kubelet) sourceData(ctx context.Context, ns string, secret bool, name string, optional *bool) (map[string]string, error) {
	out := map[string]string{}
	kind := "config map"
	var err error
	if secret {
		kind = "secret"
		var s *corev1.Secret
		if s, err = k.cs.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
			for kk, v := range s.Data {
				out[kk] = string(v)
			}
		}
	} else {
		var cm *corev1.ConfigMap
		if cm, err = k.cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
			maps.Copy(out, cm.Data)
		}
	}
	switch {
	case apierrors.IsNotFound(err) && ptr.Deref(optional, false):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("%s %s: %w", kind, name, err)
	}
	return out, nil
}

func (k *kubelet) envValue(ctx context.Context, p *corev1.Pod, e corev1.EnvVar) (string, bool, error) {
	src := e.ValueFrom
	switch {
	case src == nil:
		return e.Value, false, nil
	case src.SecretKeyRef != nil || src.ConfigMapKeyRef != nil:
		secret, name, key, optional := true, "", "", (*bool)(nil)
		if ref := src.SecretKeyRef; ref != nil {
			name, key, optional = ref.Name, ref.Key, ref.Optional
		} else {
			ref := src.ConfigMapKeyRef
			secret, name, key, optional = false, ref.Name, ref.Key, ref.Optional
		}
		data, err := k.sourceData(ctx, p.Namespace, secret, name, optional)
		if err != nil {
			return "", false, err
		}
		v, ok := data[key]
		if !ok && !ptr.Deref(optional, false) {
			return "", false, fmt.Errorf("%s %s has no key %s", map[bool]string{true: "secret", false: "config map"}[secret], name, key)
		}
		return v, !ok, nil
	case src.FieldRef != nil:
		switch src.FieldRef.FieldPath {
		case "metadata.name":
			return p.Name, false, nil
		case "metadata.namespace":
			return p.Namespace, false, nil
		}
		return "", false, fmt.Errorf("field %s is not supported by the e2e kubelet", src.FieldRef.FieldPath)
	}
	return "", false, errors.New("unsupported valueFrom")
}

// terminationMessage is what the kubelet reports: the termination log, or with
// FallbackToLogsOnError and a failure, the log's tail.
func terminationMessage(c *corev1.Container, termPath, logPath string, exit int) string {
	if b, err := os.ReadFile(termPath); err == nil && len(b) > 0 {
		return tail(b, 4096)
	}
	if c.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError && exit != 0 {
		if b := logText(logPath); b != nil {
			return tail(b, 2048)
		}
	}
	return ""
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}

func (k *kubelet) setStatus(ctx context.Context, p *corev1.Pod, mutate func(*corev1.PodStatus)) {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := k.cs.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.UID != p.UID {
			return apierrors.NewNotFound(corev1.Resource("pods"), p.Name)
		}
		mutate(&cur.Status)
		_, err = k.cs.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		k.log.Warn("pod status update failed", "pod", p.Namespace+"/"+p.Name, "err", err)
	}
}

func setCondition(st *corev1.PodStatus, t corev1.PodConditionType, ok bool) {
	s := corev1.ConditionFalse
	if ok {
		s = corev1.ConditionTrue
	}
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			if st.Conditions[i].Status != s {
				st.Conditions[i].Status, st.Conditions[i].LastTransitionTime = s, metav1.Now()
			}
			return
		}
	}
	st.Conditions = append(st.Conditions, corev1.PodCondition{Type: t, Status: s, LastTransitionTime: metav1.Now()})
}

func setPodReady(st *corev1.PodStatus, ok bool) {
	setCondition(st, corev1.ContainersReady, ok)
	setCondition(st, corev1.PodReady, ok)
	for i := range st.ContainerStatuses {
		st.ContainerStatuses[i].Ready = ok
	}
}
