//go:build faults

package faults

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"sless.dev/sless/buildkit"
	"sless.dev/sless/test/testenv"
)

// s is what every scenario shares. Scenarios run one after another: they stop and start
// the same broker and database server.
var s *suite

type suite struct {
	dir     string // logs and scratch space, removed at the end
	sless   string // the binary under test
	broker  *broker
	pg      *postgres
	fn      *buildkit.Artifact // the ledger function, for scenarios that run it directly
	results results
}

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	start := time.Now()
	dir, err := os.MkdirTemp("", "sless-faults-")
	if err == nil {
		// The PostgreSQL user must reach its directory below this one.
		err = errors.Join(os.Chmod(dir, 0o755), os.Mkdir(filepath.Join(dir, "logs"), 0o755))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	s = &suite{dir: dir}
	defer s.tearDown()
	if err := s.setUp(); err != nil {
		fmt.Fprintln(os.Stderr, "faults: setting up:", err)
		return 1
	}
	fmt.Printf("faults: set up in %s (sless, private RabbitMQ %s, private PostgreSQL on port %d)\n",
		time.Since(start).Round(time.Millisecond), s.broker.url, s.pg.port)
	code := m.Run()
	s.report()
	fmt.Printf("faults: took %s\n", time.Since(start).Round(time.Second))
	return code
}

// setUp builds sless and the ledger function while the broker and the database start.
func (s *suite) setUp() error {
	var wg sync.WaitGroup
	errs := make([]error, 4)
	step := func(i int, what string, f func() error) {
		wg.Go(func() {
			start := time.Now()
			if errs[i] = f(); errs[i] == nil {
				fmt.Printf("faults: %s in %s\n", what, time.Since(start).Round(time.Millisecond))
			}
		})
	}
	step(0, "built sless", func() (err error) { s.sless, err = buildSless(s.dir); return err })
	step(1, "started RabbitMQ", func() (err error) { s.broker, err = startBroker(filepath.Join(s.dir, "rabbitmq")); return err })
	step(2, "started PostgreSQL", func() (err error) { s.pg, err = startPostgres(filepath.Join(s.dir, "postgres")); return err })
	step(3, "built the ledger function", func() (err error) { s.fn, err = buildLedger(s.dir); return err })
	wg.Wait()
	return errors.Join(errs...)
}

func (s *suite) tearDown() {
	if s.broker != nil {
		s.broker.close()
	}
	if s.pg != nil {
		_ = s.pg.stop()
	}
}

// report prints the table and writes it to $SLESS_FAULTS_REPORT when set.
func (s *suite) report() {
	s.results.markdown(os.Stdout)
	if path := os.Getenv("SLESS_FAULTS_REPORT"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "faults: report:", err)
			return
		}
		defer f.Close()
		s.results.markdown(f)
	}
}

func buildSless(dir string) (string, error) {
	bin := filepath.Join(dir, "sless")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/sless")
	// Built as CI's compile stage and the e2e suite build it, so the build cache holds it:
	// CGO_ENABLED=0 (the image's) recompiled every package, 13 minutes beside make test.
	cmd.Dir = testenv.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/sless: %w\n%s", err, out)
	}
	return bin, nil
}
