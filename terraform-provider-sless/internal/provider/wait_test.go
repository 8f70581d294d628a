package provider

import (
	"context"
	"testing"
	"time"
)

// TestPollCountsOnlyWhatCounts: time while check says it does not count (a build waiting for
// a slot) is not charged to the timeout; counted time is.
func TestPollCountsOnlyWhatCounts(t *testing.T) {
	const timeout = 500 * time.Millisecond
	start := time.Now()
	_, err := pollCounting(context.Background(), timeout, func() (bool, bool, string, error) {
		held := time.Since(start) < 3*timeout
		return !held, !held, "", nil
	})
	if err != nil || time.Since(start) < 3*timeout {
		t.Fatalf("held for %s, then done: %v after %s", 3*timeout, err, time.Since(start))
	}
	start = time.Now()
	_, err = pollCounting(context.Background(), timeout, func() (bool, bool, string, error) {
		return time.Since(start) > 3*timeout, true, "", nil
	})
	if !timedOut(context.Background(), err) {
		t.Fatalf("counted time beyond the timeout: %v after %s", err, time.Since(start))
	}
}
