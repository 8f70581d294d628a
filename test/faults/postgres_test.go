//go:build faults

package faults

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// postgres is the suite's own PostgreSQL cluster (initdb under the suite's directory, a free
// port, loopback only), so stopping it never touches the machine's server.
type postgres struct {
	dir  string
	port int
	bin  string
	user *syscall.Credential // PostgreSQL refuses to run as root
	proc *proc
}

func startPostgres(dir string) (*postgres, error) {
	bin, err := postgresBin()
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	p := &postgres{dir: dir, port: port, bin: bin}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("postgres directory: %w", err)
	}
	if os.Geteuid() == 0 {
		if p.user, err = credentialOf("postgres"); err != nil {
			return nil, err
		}
		if err := os.Chown(dir, int(p.user.Uid), int(p.user.Gid)); err != nil {
			return nil, fmt.Errorf("hand %s to the postgres user: %w", dir, err)
		}
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", p.data(), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync")
	initdb.Dir, initdb.SysProcAttr = dir, &syscall.SysProcAttr{Credential: p.user}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	if err := p.start(); err != nil {
		return nil, err // a server that did start dies with the suite (orphanSignal)
	}
	return p, nil
}

func (p *postgres) data() string { return filepath.Join(p.dir, "data") }

// start runs the server in the foreground and waits until it accepts connections. fsync is
// off: the suite stops the server cleanly and never crashes the machine.
func (p *postgres) start() error {
	proc, err := startProc(procSpec{name: "postgres", user: p.user, dir: p.dir, orphanSignal: syscall.SIGINT, argv: []string{
		filepath.Join(p.bin, "postgres"), "-D", p.data(), "-p", strconv.Itoa(p.port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=" + p.dir, "-c", "fsync=off",
	}})
	if err != nil {
		return err
	}
	p.proc = proc
	if err := until(time.Minute, proc, p.up); err != nil {
		return fmt.Errorf("private PostgreSQL did not start: %w", err)
	}
	return nil
}

// stop is a fast shutdown (SIGINT): sessions are disconnected, the server exits cleanly.
func (p *postgres) stop() error { return p.proc.signal(syscall.SIGINT, time.Minute) }

func (p *postgres) up() bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, p.url("postgres"))
	if err != nil {
		return false
	}
	c.Close(ctx)
	return true
}

func (p *postgres) url(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", p.port, db)
}

// newDatabase creates a database for one scenario; the whole cluster goes with the suite.
func (p *postgres) newDatabase(t *testing.T, name string) string {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, p.url("postgres"))
	if err != nil {
		t.Fatalf("connect to the private PostgreSQL: %v", err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	return p.url(name)
}

// historyOf counts the succeeded invocation records of function ns/fn by kind.
func historyOf(dbURL, ns, fn string) (map[string]int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, fmt.Errorf("connect to the history database: %w", err)
	}
	defer c.Close(ctx)
	rows, err := c.Query(ctx, `SELECT kind, count(*) FROM invocations WHERE namespace = $1 AND function = $2 AND status = 'succeeded' GROUP BY kind`, ns, fn)
	if err != nil {
		return nil, fmt.Errorf("count history records: %w", err)
	}
	counts := map[string]int{}
	var kind string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&kind, &n}, func() error { counts[kind] = n; return nil })
	return counts, err
}

// settledHistory waits until the history of ns/fn holds want (every kind) or stopped growing for
// quiet, and returns it: writers flush every 200 ms, and after an outage retry with a
// backoff of up to 5 s.
func settledHistory(t *testing.T, dbURL, ns, fn string, want map[string]int, quiet time.Duration) map[string]int {
	t.Helper()
	var last map[string]int
	changed := time.Now()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		got, err := historyOf(dbURL, ns, fn)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got, last) {
			last, changed = got, time.Now()
		}
		if maps.Equal(got, want) || time.Since(changed) >= quiet {
			return got
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("history of %s/%s still changing after 1m: %v", ns, fn, last)
	return nil
}

// historyResumed waits until the history of ns/fn holds a record of an invocation that started
// after down, when the database stopped (only a writer that wrote again after the restart can
// have put it there, however fast it caught up), and returns how long that took after up.
func historyResumed(dbURL, ns, fn string, down, up time.Time, timeout time.Duration) (time.Duration, error) {
	written := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			return false
		}
		defer c.Close(ctx)
		var n int
		err = c.QueryRow(ctx, `SELECT count(*) FROM invocations WHERE namespace = $1 AND function = $2 AND started_at > $3`, ns, fn, down).Scan(&n)
		return err == nil && n > 0
	}
	err := until(timeout, nil, written)
	return time.Since(up), err
}

// postgresBin is the directory of initdb and postgres: on PATH, or Debian's newest cluster
// version under /usr/lib/postgresql.
func postgresBin() (string, error) {
	if path, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(path), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return versionOf(a) - versionOf(b) })
	if len(dirs) == 0 {
		return "", fmt.Errorf("no PostgreSQL server binaries (initdb) on PATH or in /usr/lib/postgresql/*/bin")
	}
	return dirs[len(dirs)-1], nil
}

func versionOf(bin string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(bin)))
	return v
}

func credentialOf(name string) (*syscall.Credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL refuses to run as root and there is no %s user: %w", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// killWindow is how long before a SIGKILL an invocation may have run and still be missing
// from the history: the writer flushes every 200 ms (its first write also migrates), the
// rest is margin for a loaded machine. Nothing that ran earlier may be lost.
const killWindow = 2 * time.Second

// killBound is what a kill at `at` may cost the history of the ids of prefix: their runs in
// the window before it (and the few ms the killed process's in-flight work takes to stop).
func killBound(l ledger, prefix string, at time.Time) int {
	return l.ranBetween(prefix, at.Add(-killWindow), at.Add(50*time.Millisecond))
}

// assertHistoryLoss checks the records of kind written for the invocations that ran: never
// more, and at most bound fewer.
func assertHistoryLoss(t *testing.T, kind string, ran, written, bound int) {
	t.Helper()
	if written > ran {
		t.Errorf("%d succeeded %s records in the history for %d invocations that ran", written, kind, ran)
	}
	if ran-written > bound {
		t.Errorf("%d of %d %s invocations are missing from the history; bound %d", ran-written, ran, kind, bound)
	}
}
