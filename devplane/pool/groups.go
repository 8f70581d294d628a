package pool

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Process groups are recorded on disk while they run, so that what a function forked is
// killed even when sless dev itself was killed: Pdeathsig takes down the wrapper, but not the
// children it left in its group. A record names the group, the start time of its leader and
// the boot, so a later run kills only processes of that group started since, never a
// process that reuses the number.

// groupRecord is one line: pgid, the leader's start time (clock ticks since boot), boot id.
type groupRecord struct {
	pgid  int
	start uint64
	boot  string
}

func groupFile(dir string, pgid int) string { return filepath.Join(dir, strconv.Itoa(pgid)+".pgid") }

// recordGroup notes the group led by pid; "" dir records nothing.
func recordGroup(dir string, pid int) error {
	if dir == "" {
		return nil
	}
	start, err := procStart(pid)
	if err != nil {
		return err
	}
	line := fmt.Sprintf("%d %d %s\n", pid, start, bootID())
	if err := os.WriteFile(groupFile(dir, pid), []byte(line), 0o600); err != nil {
		return fmt.Errorf("recording process group %d: %w", pid, err)
	}
	return nil
}

// forgetGroup removes the record of a group that is gone.
func forgetGroup(dir string, pgid int) {
	if dir != "" {
		_ = os.Remove(groupFile(dir, pgid))
	}
}

// reapGroups kills what is left of the groups recorded in dir by an earlier run and removes
// the records.
func reapGroups(dir string, log *slog.Logger) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("process group records %s: %w", dir, err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.pgid"))
	if err != nil {
		return err
	}
	boot := bootID()
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var rec groupRecord
		if _, err := fmt.Sscanf(string(data), "%d %d %s", &rec.pgid, &rec.start, &rec.boot); err == nil && rec.boot == boot && rec.pgid > 1 {
			if n := killGroupSince(rec); n > 0 {
				log.Warn("Warning: killed processes a function left behind when sless dev last stopped", "pgid", rec.pgid, "processes", n)
			}
		}
		_ = os.Remove(f)
	}
	return nil
}

// killGroupSince kills every process of rec's group started no earlier than its leader.
func killGroupSince(rec groupRecord) int {
	entries, _ := os.ReadDir("/proc")
	killed := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		pgrp, start, err := procGroupStart(pid)
		if err != nil || pgrp != rec.pgid || start < rec.start {
			continue
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed++
		}
	}
	return killed
}

func procStart(pid int) (uint64, error) {
	_, start, err := procGroupStart(pid)
	return start, err
}

// procGroupStart reads a process's group and start time from /proc/<pid>/stat.
func procGroupStart(pid int) (pgrp int, start uint64, err error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// The command name is in parentheses and may hold anything: fields follow the last ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, 0, errors.New("malformed stat")
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 20 {
		return 0, 0, errors.New("malformed stat")
	}
	if pgrp, err = strconv.Atoi(fields[2]); err != nil {
		return 0, 0, err
	}
	start, err = strconv.ParseUint(fields[19], 10, 64)
	return pgrp, start, err
}

func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}
