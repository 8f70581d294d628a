//go:build faults

package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/client"
	"sless.dev/sless/test/testkit"
)

// devInstance is a `sless dev` process on a fixed port and data directory, so a restart
// comes back where the killed one was and callers retry the same URL.
type devInstance struct {
	t        *testing.T
	spec     procSpec
	proc     *proc
	dataDir  string
	endpoint string
	ns       string
	client   *client.Client
	ledger   *ledgerServer // what its function ran
}

// newDev starts `sless dev` with its event triggers on the suite's broker and its history in
// dbURL, and deploys the ledger function (one process always warm, at most two).
func newDev(t *testing.T, dbURL string) *devInstance {
	t.Helper()
	addr, dir := testkit.FreeAddr(t), t.TempDir()
	d := &devInstance{t: t, dataDir: filepath.Join(dir, "data"), endpoint: "http://" + addr, ns: api.TenantNamespace("dev"),
		ledger: newLedger(t)}
	d.spec = procSpec{name: "sless-dev-" + t.Name(), argv: []string{s.sless, "dev", "--data-dir", d.dataDir, "--listen", addr,
		"--amqp-url", s.broker.url, "--database-url", dbURL,
		// The ledger listens on this machine's loopback, which an isolated function cannot reach.
		"--function-network", "host"}}
	d.start()
	ctx := context.Background()
	_, err := d.client.CreateFunction(ctx, d.ns, api.CreateFunction{Name: "ledger", FunctionFields: api.FunctionFields{
		Runtime: ptr.To(ledgerRuntime), EnvVars: &map[string]string{"FAULTS_LEDGER": d.ledger.URL},
		MinReplicas: ptr.To[int32](1), MaxReplicas: ptr.To[int32](2), ScalingTarget: ptr.To[int32](64),
	}})
	if err != nil {
		t.Fatalf("create the ledger function: %v", err)
	}
	zip, err := ledgerZip()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.client.UploadSource(ctx, d.ns, "ledger", bytes.NewReader(zip)); err != nil {
		t.Fatalf("upload the ledger function: %v", err)
	}
	d.waitFor("the ledger function to be Ready", func() bool {
		fn, err := d.client.GetFunction(ctx, d.ns, "ledger")
		return err == nil && fn.Status.Ready
	})
	return d
}

// start (re)starts the process and waits until it serves with its token written.
func (d *devInstance) start() {
	d.t.Helper()
	d.proc = startProcT(d.t, d.spec)
	tokenFile := filepath.Join(d.dataDir, "token")
	d.waitFor("sless dev to serve", func() bool {
		_, err := os.Stat(tokenFile)
		return err == nil && healthy(d.endpoint+"/healthz")
	})
	token, err := os.ReadFile(tokenFile)
	if err == nil {
		d.client, err = client.New(d.endpoint, strings.TrimSpace(string(token)), nil)
	}
	if err != nil {
		d.t.Fatalf("sless dev token: %v", err)
	}
}

func (d *devInstance) waitFor(what string, cond func() bool) {
	d.t.Helper()
	if err := until(3*time.Minute, d.proc, cond); err != nil {
		d.t.Fatalf("waiting for %s: %v", what, err)
	}
}

// queue names a queue of the tenant: sless dev runs every tenant's event triggers on one
// broker and keeps each to queues prefixed with its namespace.
func (d *devInstance) queue(name string) string { return d.ns + "." + name }

// addEventTrigger binds the ledger function to queue and waits until it consumes.
func (d *devInstance) addEventTrigger(queue string) {
	d.t.Helper()
	s.broker.declareQueue(d.t, queue)
	ctx := context.Background()
	_, err := d.client.CreateTrigger(ctx, d.ns, api.CreateTrigger{Name: "events", TriggerFields: api.TriggerFields{
		Type: ptr.To(api.TriggerEvent), Function: ptr.To("ledger"), Enabled: ptr.To(true), Queue: ptr.To(queue),
		BrokerSecret: ptr.To("unused-in-dev"), // sless dev runs every event trigger on its --amqp-url
	}})
	if err != nil {
		d.t.Fatalf("create the event trigger: %v", err)
	}
	d.waitFor("the event trigger to be active", func() bool {
		tr, err := d.client.GetTrigger(ctx, d.ns, "events")
		return err == nil && tr.Status.Active
	})
}

// runJob runs the ledger function once as a job, so the state holds a finished job too.
func (d *devInstance) runJob() {
	d.t.Helper()
	ctx := context.Background()
	_, err := d.client.CreateJob(ctx, d.ns, api.CreateJob{Name: "once", JobFields: api.JobFields{
		Function: ptr.To("ledger"), Event: ptr.To(json.RawMessage(`{"id":"job-0"}`)), RunID: ptr.To[int64](1),
	}})
	if err != nil {
		d.t.Fatalf("create the job: %v", err)
	}
	d.waitFor("the job to succeed", func() bool {
		j, err := d.client.GetJob(ctx, d.ns, "once")
		return err == nil && j.Status.Phase == api.JobSucceeded
	})
}

// state is every function, trigger and job of the namespace as the API lists them.
func (d *devInstance) state() (string, error) {
	ctx := context.Background()
	fns, err := d.client.ListFunctions(ctx, d.ns)
	if err != nil {
		return "", err
	}
	triggers, err := d.client.ListTriggers(ctx, d.ns)
	if err != nil {
		return "", err
	}
	jobs, err := d.client.ListJobs(ctx, d.ns)
	if err != nil {
		return "", err
	}
	b, err := json.MarshalIndent(map[string]any{"functions": fns, "triggers": triggers, "jobs": jobs}, "", "  ")
	return string(b), err
}

// devLoads is the traffic of a sless dev scenario: HTTP invocations of the ledger function
// and messages on its event trigger's queue, both under way together.
type devLoads struct {
	http *httpLoad
	pub  *publication
}

// startLoads publishes at publishRate per second (0: at once).
func (d *devInstance) startLoads(queue string, publishRate int) devLoads {
	return devLoads{pub: s.broker.publish(d.t, queue, "e", messages, publishRate),
		http: startHTTPLoad(d.endpoint+"/fn/"+d.ns+"/ledger", "h", invocations)}
}

// underWay waits until a third of both loads is done, so a fault lands in the middle.
func (d *devInstance) underWay(l devLoads) {
	d.t.Helper()
	d.waitFor("a third of the load", func() bool {
		return l.http.finished() >= invocations/3 && readLedger(d.t, d.ledger).count("e", messages, time.Time{}).distinct >= messages/3
	})
}

// outcome is what a sless dev scenario measured: the ledger tallies of both loads, the
// history counts by kind and the table rows.
type outcome struct {
	h, e tally
	hist map[string]int
	rows []row
}

// finish waits for both loads to end, for every message to have run and for the history to
// settle (extra: further records expected by kind).
func (d *devInstance) finish(scenario string, l devLoads, f fault, quiet time.Duration, dbURL string, extra map[string]int) outcome {
	d.t.Helper()
	l.http.wait(d.t)
	l.pub.wait(d.t)
	var o outcome
	o.e = waitLedger(d.t, d.ledger, "e", messages, f.over, 2*time.Minute)
	o.h = readLedger(d.t, d.ledger).count("h", invocations, f.over)
	if o.h.distinct != invocations {
		d.t.Errorf("%d invocations were answered 2xx without the function running them", invocations-o.h.distinct)
	}
	want := map[string]int{"http": o.h.runs, "event": o.e.runs}
	maps.Copy(want, extra)
	o.hist = settledHistory(d.t, dbURL, d.ns, "ledger", want, quiet)
	o.rows = []row{httpRow(scenario, l.http, o.h, o.hist["http"], f), amqpRow(scenario, loadTrigger, messages, o.e, o.hist["event"], f)}
	return o
}

// TestKillDev: sless dev killed with SIGKILL (its function processes die with it) while
// 5,000 HTTP invocations and 5,000 AMQP messages are under way, then restarted on the same
// data directory. Callers retry; every message runs; the state the API lists is the same.
func TestKillDev(t *testing.T) {
	const scenario = "kill -9 `sless dev`"
	db := s.pg.newDatabase(t, "kill_dev")
	d := newDev(t, db)
	d.addEventTrigger(d.queue("faults-kill-dev"))
	d.runJob()
	before, err := d.state()
	if err != nil {
		t.Fatal(err)
	}
	loads := d.startLoads(d.queue("faults-kill-dev"), rate)
	d.underWay(loads)
	killed := time.Now()
	d.proc.kill(t)
	atKill := readLedger(t, d.ledger).count("e", messages, killed)
	t.Logf("in flight at the kill: %d HTTP invocations and %d messages not yet run", invocations-loads.http.finished(), messages-atKill.distinct)
	f := fault{at: killed, over: time.Now()} // the function processes died with sless dev
	d.start()
	// Ready again once the build is found by hash and the trigger consumes again.
	var after string
	if err := until(time.Minute, d.proc, func() bool { after, err = d.state(); return err == nil && after == before }); err != nil {
		t.Errorf("state after the restart differs:\nbefore: %s\nafter: %s", before, after)
	}
	o := d.finish(scenario, loads, f, 2*time.Second, db, map[string]int{"job": 1})
	s.results.add(t, o.rows...)
	l := readLedger(t, d.ledger)
	assertHistoryLoss(t, "http", o.h.runs, o.hist["http"], killBound(l, "h", killed))
	assertHistoryLoss(t, "event", o.e.runs, o.hist["event"], killBound(l, "e", killed))
	if o.hist["job"] != 1 {
		t.Errorf("the job's history record: %d, want 1 (written long before the kill)", o.hist["job"])
	}
}

// TestPostgresRestart: the history database stopped for three seconds under 5,000 HTTP
// invocations and 5,000 AMQP messages through sless dev, then started again. No invocation
// may fail or repeat because of it; the history API says 503 while the database is down; the
// records lost are those of the outage and stated.
func TestPostgresRestart(t *testing.T) {
	const (
		scenario = "stop/start PostgreSQL (3 s)"
		outage   = 3 * time.Second
	)
	db := s.pg.newDatabase(t, "postgres_restart")
	d := newDev(t, db)
	d.addEventTrigger(d.queue("faults-postgres-restart"))
	loads := d.startLoads(d.queue("faults-postgres-restart"), rate)
	d.underWay(loads)
	stopped := time.Now()
	if err := s.pg.stop(); err != nil {
		t.Fatal(err)
	}
	down := time.Now()
	_, err := d.client.ListInvocations(context.Background(), d.ns, "ledger", 10, "")
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("history API with its database down: %v; want 503", err)
	}
	time.Sleep(time.Until(stopped.Add(outage)))
	if err := s.pg.start(); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	wrote, err := historyResumed(db, d.ns, "ledger", down, started, time.Minute)
	if err != nil {
		t.Errorf("no history written after PostgreSQL came back: %v", err)
	}
	o := d.finish(scenario, loads, fault{at: stopped, over: started}, 6*time.Second, db, nil)
	// Invocations never paused; what recovered is the history writer.
	for i := range o.rows {
		o.rows[i].recovery = wrote
	}
	s.results.add(t, o.rows...)
	if n := loads.http.retried.Load(); n > 0 {
		t.Errorf("%d invocations failed while PostgreSQL was down", n)
	}
	if _, err := d.client.ListInvocations(context.Background(), d.ns, "ledger", 10, ""); err != nil {
		t.Errorf("history API after PostgreSQL came back: %v", err)
	}
	if o.h.duplicates()+o.e.duplicates() > 0 {
		t.Errorf("invocations ran twice (%d HTTP, %d AMQP) although none failed", o.h.duplicates(), o.e.duplicates())
	}
	// A record is lost only if its batch failed three times while the database was down:
	// the invocations of the outage, one batch on either side.
	window := readLedger(t, d.ledger).ranBetween("", stopped.Add(-time.Second), started.Add(time.Second))
	t.Logf("history written again %s after PostgreSQL started; %d invocations ran during the outage window", wrote.Round(time.Millisecond), window)
	assertHistoryLoss(t, "http+event", o.h.runs+o.e.runs, o.hist["http"]+o.hist["event"], window+500)
}
