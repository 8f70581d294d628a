package pool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"sless.dev/sless/rules"
)

// JobResult is one run of a function in job mode (SLESS_MODE=job).
type JobResult struct {
	// Result is what the handler returned (the wrapper's last line of stdout).
	Result string
	// Output is the tail of everything the process printed, stdout and stderr in arrival
	// order, as a pod's log would show it (the result line included).
	Output   string
	Duration time.Duration
	// Err is set when the run failed: the handler's error, a timeout or a crash.
	Err error
}

// RunJob runs spec's function once with event in job mode and waits for it; its lines go to
// OnOutput under key, as Instance "run", and its lines, result, output and error are masked
// by spec.Mask. Only spec.Artifact, Env, Files, MemoryMB, Timeout and Mask are used. The
// process runs in its own group, killed with whatever it forked when it exits, when ctx
// ends or when the timeout (plus a margin) passes; the group is recorded in RunDir like the
// pool's processes.
func (p *Pool) RunJob(ctx context.Context, key string, spec Spec, event []byte) JobResult {
	ctx, span := tracer.Start(ctx, "local.job", trace.WithAttributes(attribute.String("sless.runtime", spec.Artifact.Runtime)))
	defer span.End()
	if spec.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, spec.Timeout+rules.InvocationMargin)
		defer cancel()
	}
	if len(event) == 0 {
		event = []byte("{}")
	}
	name := "job" + strconv.FormatInt(p.seq.Add(1), 10)
	sb, err := p.sandbox(name)
	if err != nil {
		return JobResult{Err: err}
	}
	defer p.release(sb)
	cmd, jailed, err := p.jobCommand(ctx, name, spec, sb, append(processEnv(spec, false), "SLESS_MODE=job", "SLESS_EVENT="+string(event)))
	if err != nil {
		return JobResult{Err: err}
	}
	var stdout bytes.Buffer
	logs := newTailBuffer(8<<10, spec.Mask)
	limit := newOutputLimit(p.opts)
	lines := func(stream string) *lineWriter {
		return &lineWriter{stream: stream, tail: logs, limit: limit, mask: spec.Mask, send: func(stream, text string) {
			if on := p.opts.OnOutput; on != nil {
				on(Line{Time: time.Now(), Function: key, Instance: "run", Stream: stream, Text: text})
			}
		}}
	}
	cmd.Stdout = io.MultiWriter(&limitedBuffer{buf: &stdout, max: 1 << 20}, lines("stdout"))
	cmd.Stderr = lines("stderr")
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	start := time.Now()
	if jailed != nil {
		err = p.jail.start(jailed)
		defer p.jail.cleanup(jailed)
	} else {
		err = cmd.Start()
	}
	if err == nil {
		pgid := cmd.Process.Pid
		if rerr := recordGroup(p.opts.RunDir, pgid); rerr != nil {
			p.log.Warn("Warning: what this job forks may outlive a crash of sless dev", "error", rerr)
		}
		exited := make(chan struct{})
		say := func(text string) {
			logs.Write([]byte("\n" + text + "\n"))
			lines("stderr").send("stderr", text)
		}
		switch {
		case jailed != nil && jailed.cg != nil:
			jailed.cg.killOnOOM(exited)
		case jailed != nil && spec.MemoryMB > 0:
			go p.watchMemory(pgid, spec.MemoryMB, exited, p.log.With("job", key), say)
		}
		err = cmd.Wait()
		close(exited)
		if jailed != nil && jailed.cg != nil && jailed.cg.oomKills() > 0 {
			p.log.Warn("Warning: job process killed: over its memory_mb", "job", key, "memory_mb", spec.MemoryMB)
			say(overMemory(spec.MemoryMB))
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		forgetGroup(p.opts.RunDir, pgid)
	}
	res := JobResult{Duration: time.Since(start), Output: logs.String(), Result: spec.Mask.Mask(lastLine(stdout.String()))}
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		res.Err = fmt.Errorf("job did not finish within its timeout of %s: killed", spec.Timeout)
	case ctx.Err() != nil:
		res.Err = fmt.Errorf("job run stopped: %w", ctx.Err())
	case err != nil:
		res.Err = jobError(res.Result, err)
	}
	if res.Err != nil {
		span.SetStatus(codes.Error, res.Err.Error())
	}
	return res
}

// jobCommand runs spec's build in job mode, in its own group, jailed in sb (jailed set) when
// the pool jails its functions.
func (p *Pool) jobCommand(ctx context.Context, name string, spec Spec, sb *sandbox, env []string) (cmd *exec.Cmd, jailed *launch, err error) {
	art := spec.Artifact
	argv := command(art)
	if p.jail != nil {
		l, err := p.jail.launch(ctx, name, art.Dir, argv, sb, jailRoot{TmpMB: tmpMB(spec), Files: spec.Files}, jailEnv(env), processLimits{MemoryMB: spec.MemoryMB})
		if err != nil {
			return nil, nil, err
		}
		return l.cmd, l, nil
	}
	cmd = exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = art.Dir
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd, nil, nil
}

// jobError prefers the wrapper's {"error": "..."} result over the bare exit status.
func jobError(result string, exitErr error) error {
	var body struct {
		Error string `json:"error"`
	}
	if json.Unmarshal([]byte(result), &body) == nil && body.Error != "" {
		return errors.New(body.Error)
	}
	return fmt.Errorf("function process failed: %w", exitErr)
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\r\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// limitedBuffer keeps the first max bytes and discards the rest without failing the writer.
type limitedBuffer struct {
	buf *bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - l.buf.Len(); room > 0 {
		l.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
