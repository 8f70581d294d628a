package cluster

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/backend"
	"sless.dev/sless/rules"
	"sless.dev/sless/scaling"
)

// A function's log is its pods' logs through the API server (pods/log, which the kubelet
// serves), every replica merged; a build's is its pod's kaniko step in the build namespace; a
// job's its latest run's pod. A pod's log lives as long as the pod: what a function printed
// before it scaled to zero is gone with its pods (export logs with OpenTelemetry or the
// cluster's log collector to keep them).

// newPodsEvery is how often a followed function is checked for new replicas.
const newPodsEvery = 2 * time.Second

// Logs implements backend.Logs over pods/log.
// What a function or its job printed is shown with the values of the function's secrets
// masked (rules.SecretMasker, the current versions' values): the pods' own logs hold what
// was printed, as a CI system's raw logs do.
func (b *Backend) Logs(ctx context.Context, q backend.LogQuery, emit func(api.LogLine) error) error {
	sel, ns, container, code, err := b.logPods(ctx, q)
	if err != nil {
		return err
	}
	var names []string
	if code != nil {
		names = code.SecretNames()
	}
	mask, err := SecretMasker(ctx, b.client, ns, names)
	if err != nil {
		return err
	}
	return b.readLogs(ctx, q, ns, sel, container, func(l api.LogLine) error {
		l.Line = mask.Mask(l.Line)
		return emit(l)
	})
}

// SecretMasker masks the values of the sless secrets names (of namespace ns).
func SecretMasker(ctx context.Context, c client.Reader, ns string, names []string) (*rules.SecretMasker, error) {
	values, err := secretValues(ctx, c, ns, names)
	if err != nil {
		return nil, err
	}
	return rules.NewSecretMasker(values), nil
}

// secretValues reads the values of the sless secrets names (of namespace ns); a secret that
// does not exist, or is not sless's, has none.
func secretValues(ctx context.Context, c client.Reader, ns string, names []string) ([][]byte, error) {
	var values [][]byte
	for _, name := range names {
		var s corev1.Secret
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading secret %s/%s to mask its values: %w", ns, name, err)
		}
		if s.Labels[rules.SecretLabel] == "true" {
			for _, v := range s.Data {
				values = append(values, v)
			}
		}
	}
	return values, nil
}

// SecretMaskSource is the masker a dispatcher masks the answers it records with
// (dispatcher.MaskingInvoker): the values of the sless secrets Names of Namespace, read
// through Client at most every Refresh. It keeps masking values rotated away during its life
// (a dispatcher pod's: one queue drain or one cron tick), as pods still draining may answer
// with them.
type SecretMaskSource struct {
	Client    client.Reader
	Namespace string
	Names     []string
	Refresh   time.Duration

	mu   sync.Mutex
	seen map[string]bool
	mask *rules.SecretMasker
	read time.Time
}

// Masker is the masker now; an error when the secrets cannot be read.
func (m *SecretMaskSource) Masker(ctx context.Context) (*rules.SecretMasker, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.read.IsZero() && time.Since(m.read) < m.Refresh {
		return m.mask, nil
	}
	values, err := secretValues(ctx, m.Client, m.Namespace, m.Names)
	if err != nil {
		return nil, err
	}
	if m.seen == nil {
		m.seen = map[string]bool{}
	}
	grew := false
	for _, v := range values {
		if !m.seen[string(v)] {
			m.seen[string(v)], grew = true, true
		}
	}
	if grew {
		all := make([][]byte, 0, len(m.seen))
		for v := range m.seen {
			all = append(all, []byte(v))
		}
		m.mask = rules.NewSecretMasker(all)
	}
	m.read = time.Now()
	return m.mask, nil
}

// readLogs emits the lines of the selected pods as they stand, oldest first (the last q.Tail
// of them), then, with q.Follow, the new ones until ctx ends.
func (b *Backend) readLogs(ctx context.Context, q backend.LogQuery, ns string, sel labels.Selector, container string, emit func(api.LogLine) error) error {
	pods, err := b.podsOf(ctx, ns, sel, q.Source != backend.LogFunction)
	if err != nil {
		return err
	}
	opts := &corev1.PodLogOptions{Container: container, Timestamps: true}
	if !q.Since.IsZero() {
		opts.SinceTime = &metav1.Time{Time: q.Since}
	}
	var lines []api.LogLine
	// read is how far each pod's log was read: following goes on from there.
	read := map[string]*logCursor{}
	for _, p := range pods {
		got, err := b.podLog(ctx, p, opts)
		if err != nil {
			return err
		}
		c := &logCursor{}
		for _, l := range got {
			c.read(l.Time)
		}
		read[p.Name] = c
		lines = append(lines, got...)
	}
	slices.SortStableFunc(lines, func(x, y api.LogLine) int { return x.Time.Compare(y.Time) })
	if q.Tail > 0 && len(lines) > q.Tail {
		lines = lines[len(lines)-q.Tail:]
	}
	for _, l := range lines {
		if err := emit(l); err != nil {
			return err
		}
	}
	if !q.Follow {
		return nil
	}
	return b.follow(ctx, q, ns, sel, container, pods, read, emit)
}

// logPods names the pods of q's log: their selector, namespace and container, and the code
// whose secrets they may print (nil for a build, which sees none).
func (b *Backend) logPods(ctx context.Context, q backend.LogQuery) (labels.Selector, string, string, *v1alpha1.CodeSpec, error) {
	switch q.Source {
	case backend.LogJob:
		fj := &v1alpha1.FunctionJob{}
		if err := b.get(ctx, "job", q.Namespace, q.Name, fj); err != nil {
			return nil, "", "", nil, err
		}
		code := &fj.Spec.CodeSpec
		if ref := fj.Spec.FunctionRef; ref != nil {
			fn := &v1alpha1.Function{}
			if err := b.client.Get(ctx, client.ObjectKey{Namespace: q.Namespace, Name: ref.Name}, fn); err == nil {
				code = &fn.Spec.CodeSpec
			}
		}
		return labels.SelectorFromSet(labels.Set{scaling.LabelJob: q.Name}), q.Namespace, "", code, nil
	}
	fn := &v1alpha1.Function{}
	if err := b.get(ctx, "function", q.Namespace, q.Name, fn); err != nil {
		return nil, "", "", nil, err
	}
	if q.Source == backend.LogBuild {
		// Builds run in the platform namespace: the tenant's only by these labels. Their log is
		// kaniko's, the step that builds (the others only fetch and push).
		return labels.SelectorFromSet(labels.Set{scaling.LabelFunctionNamespace: q.Namespace, scaling.LabelFunction: q.Name}), b.buildNamespace, scaling.BuildKanikoContainer, nil, nil
	}
	return labels.SelectorFromSet(labels.Set{scaling.LabelFunction: q.Name}), q.Namespace, scaling.FunctionContainer, &fn.Spec.CodeSpec, nil
}

// podsOf lists the pods selected, oldest first; latest keeps only the newest (a build's or
// a job's latest run).
func (b *Backend) podsOf(ctx context.Context, ns string, sel labels.Selector, latest bool) ([]corev1.Pod, error) {
	list, err := b.pods.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("list pods for logs in %s: %w", ns, err)
	}
	pods := list.Items
	slices.SortFunc(pods, func(x, y corev1.Pod) int { return x.CreationTimestamp.Compare(y.CreationTimestamp.Time) })
	if latest && len(pods) > 1 {
		pods = pods[len(pods)-1:]
	}
	return pods, nil
}

// podLog reads one pod's log as it stands. A pod that is gone (deleted since the list, as in
// a scale-in) or whose container has not started has no lines to give: it is skipped.
func (b *Backend) podLog(ctx context.Context, p corev1.Pod, opts *corev1.PodLogOptions) ([]api.LogLine, error) {
	if !hasRun(p, opts.Container) {
		return nil, nil
	}
	rc, err := b.pods.CoreV1().Pods(p.Namespace).GetLogs(p.Name, opts).Stream(ctx)
	if podWithoutLog(err) {
		b.log.Debug("pod log skipped: the pod is gone or its container has not started", "pod", p.Namespace+"/"+p.Name, "error", err)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("log of pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	defer rc.Close()
	var lines []api.LogLine
	err = scanLog(rc, p, func(l api.LogLine) error { lines = append(lines, l); return nil })
	return lines, err
}

// hasRun tells whether p's container has run, so its log may have lines: in any pod past
// Pending, and in a Pending one only an init container that has started (a build's kaniko
// step runs while its pod is Pending).
func hasRun(p corev1.Pod, container string) bool {
	if p.Status.Phase != corev1.PodPending {
		return true
	}
	for _, cs := range p.Status.InitContainerStatuses {
		if cs.Name == container && (cs.State.Running != nil || cs.State.Terminated != nil) {
			return true
		}
	}
	return false
}

// podWithoutLog tells the answers of pods/log for a pod that has none to give: NotFound (the
// pod was deleted) and BadRequest (its container is waiting to start, or was never created).
func podWithoutLog(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.IsBadRequest(err)
}

// logCursor is how far a pod's log was read: the newest line's time and how many lines of
// that very time were read. The API server takes sinceTime in whole seconds, so following
// from the cursor gets the lines of its second again; fresh drops exactly those.
type logCursor struct {
	at time.Time
	n  int
}

// read counts a line of time t read (in the log's order).
func (c *logCursor) read(t time.Time) {
	switch {
	case t.Equal(c.at):
		c.n++
	case t.After(c.at):
		c.at, c.n = t, 1
	}
}

// since is the sinceTime to follow the pod from: nil (its whole log) when nothing was read.
func (c *logCursor) since() *metav1.Time {
	if c == nil || c.at.IsZero() {
		return nil
	}
	return &metav1.Time{Time: c.at}
}

// fresh tells whether a line of time t, the next one of a log read again from since(), was
// not read before. Once a line is fresh the cursor is passed: every later line is too.
func (c *logCursor) fresh(t time.Time) bool {
	switch {
	case c.at.IsZero():
		return true
	case t.Before(c.at):
		return false
	case t.Equal(c.at) && c.n > 0:
		c.n--
		return false
	}
	c.at, c.n = time.Time{}, 0
	return true
}

// follow streams new lines of the pods (and of replicas that start later) until ctx ends. A
// pod read before (read) goes on after its last line; one that was not gives its whole log
// from q.Since.
func (b *Backend) follow(ctx context.Context, q backend.LogQuery, ns string, sel labels.Selector, container string, pods []corev1.Pod, read map[string]*logCursor, emit func(api.LogLine) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := make(chan api.LogLine, 256)
	var wg sync.WaitGroup
	defer wg.Wait()
	followed := map[string]bool{}
	attach := func(p corev1.Pod) {
		if followed[p.Name] || !hasRun(p, container) {
			return
		}
		followed[p.Name] = true
		cursor := read[p.Name]
		if cursor == nil {
			cursor = &logCursor{}
		}
		opts := &corev1.PodLogOptions{Container: container, Timestamps: true, Follow: true, SinceTime: cursor.since()}
		if opts.SinceTime == nil && !q.Since.IsZero() {
			opts.SinceTime = &metav1.Time{Time: q.Since}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rc, err := b.pods.CoreV1().Pods(p.Namespace).GetLogs(p.Name, opts).Stream(ctx)
			if err != nil {
				return // the pod went away; its lines so far were read
			}
			defer rc.Close()
			_ = scanLog(rc, p, func(l api.LogLine) error {
				if !cursor.fresh(l.Time) {
					return nil
				}
				select {
				case out <- l:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
		}()
	}
	for _, p := range pods {
		attach(p)
	}
	tick := time.NewTicker(newPodsEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case l := <-out:
			if err := emit(l); err != nil {
				return err
			}
		case <-tick.C:
			// New replicas of a function; a build's or job's newest pod (one that was
			// still Pending, or a retried build's).
			if current, err := b.podsOf(ctx, ns, sel, q.Source != backend.LogFunction); err == nil {
				for _, p := range current {
					attach(p)
				}
			}
		}
	}
}

// scanLog reads "<RFC 3339 time> <line>" lines (the kubelet's timestamps=true form) of pod p,
// each naming the pod and the revision it runs (its label; none for builds and jobs).
func scanLog(r io.Reader, p corev1.Pod, emit func(api.LogLine) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		ts, text, _ := strings.Cut(sc.Text(), " ")
		t, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			t, text = time.Now().UTC(), sc.Text()
		}
		if err := emit(api.LogLine{Time: t.UTC(), Instance: p.Name, Revision: p.Labels[scaling.LabelRevision], Line: text}); err != nil {
			return err
		}
	}
	return sc.Err()
}
