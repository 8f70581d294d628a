package rules

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Revisions and traffic: what both control planes, the gateway and the CLI decide the same
// way. A revision is an immutable snapshot of what runs, named <function>-<n>; a function's
// traffic says which revisions get what share of its calls.

// Headers of /fn/ calls: X-Sless-Tag picks a tag's revision, X-Sless-Revision a revision by
// name (for the function's own tenant), X-Sless-Revision-Key makes the weighted choice
// sticky per key; every answer says its revision in X-Sless-Revision.
const (
	HeaderTag         = "X-Sless-Tag"
	HeaderRevision    = "X-Sless-Revision"
	HeaderRevisionKey = "X-Sless-Revision-Key"
)

// Limits of a function's traffic and revision history.
const (
	DefaultRevisionHistoryLimit, MaxRevisionHistoryLimit = 10, 100
	MaxTrafficTargets                                    = 10
	MaxTagLength                                         = 20
)

// Revision phases.
const (
	RevisionBuilding = "building"
	RevisionReady    = "ready"
	RevisionFailed   = "failed"
)

// TrafficTarget is one entry of a function's traffic: Percent of its calls for the revision
// Revision or, with Latest, for the newest ready revision; Tag gives that revision a route
// of its own (the X-Sless-Tag header, the host <tag>-<function>.<namespace>.<domain>).
type TrafficTarget struct {
	Revision string `json:"revision,omitempty"`
	Latest   bool   `json:"latest,omitempty"`
	Percent  int32  `json:"percent"`
	Tag      string `json:"tag,omitempty"`
}

// DefaultTraffic sends every call to the newest ready revision.
func DefaultTraffic() []TrafficTarget { return []TrafficTarget{{Latest: true, Percent: 100}} }

// RevisionHostLabel marks a revision's routing host, <revision>.<namespace>.rev.<domain>:
// three labels before the domain, so it is never a function's host (two).
const RevisionHostLabel = "rev"

// RevisionHost is the host the interceptor (or the local pool) routes a revision's calls
// on.
func RevisionHost(namespace, revision, domain string) string {
	return revision + "." + namespace + "." + RevisionHostLabel + "." + domain
}

// RevisionName is the name of a function's n-th revision.
func RevisionName(function string, n int64) string {
	return function + "-" + strconv.FormatInt(n, 10)
}

// RevisionOf splits a revision name into its function and number. The number has no '-',
// so the last '-' decides, and no two functions of a namespace share a revision name.
func RevisionOf(revision string) (function string, n int64, ok bool) {
	i := strings.LastIndexByte(revision, '-')
	if i <= 0 {
		return "", 0, false
	}
	n, err := strconv.ParseInt(revision[i+1:], 10, 64)
	if err != nil || n < 1 || revision[i+1] == '0' || revision[i+1] == '+' || CheckName(revision[:i]) != nil {
		return "", 0, false
	}
	return revision[:i], n, true
}

// tagPattern: no '-', so <tag>-<function> splits at its first '-'.
var tagPattern = regexp.MustCompile(`^[a-z][a-z0-9]*$`)

// CheckTag refuses a tag that cannot be a host label prefix.
func CheckTag(tag string) error {
	if len(tag) > MaxTagLength || !tagPattern.MatchString(tag) {
		return fmt.Errorf("%q is not a valid tag: use at most %d lowercase letters and digits, starting with a letter (no '-')", tag, MaxTagLength)
	}
	return nil
}

// SplitTagHost splits the first label of a tag host, <tag>-<function>, at its first '-'.
func SplitTagHost(label string) (tag, function string, ok bool) {
	tag, function, ok = strings.Cut(label, "-")
	if !ok || CheckTag(tag) != nil || CheckName(function) != nil {
		return "", "", false
	}
	return tag, function, true
}

// FieldError is a rule broken by one field of a request (JSON path, e.g. traffic[1].percent).
type FieldError struct {
	Field, Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// CheckTraffic checks the shape of a function's traffic: each entry names a revision of
// function or latest (not both), percents 0–100 summing to 100, tags valid and unique.
// Whether a named revision exists and is not failed is the control plane's to say
// (CheckTrafficRevisions).
func CheckTraffic(function string, targets []TrafficTarget) *FieldError {
	if len(targets) == 0 {
		return &FieldError{"traffic", `must have at least one entry; [{"latest": true, "percent": 100}] sends every call to the newest ready revision`}
	}
	if len(targets) > MaxTrafficTargets {
		return &FieldError{"traffic", fmt.Sprintf("has %d entries; at most %d", len(targets), MaxTrafficTargets)}
	}
	var sum int32
	tags := map[string]bool{}
	for i, t := range targets {
		at := func(f string) string { return fmt.Sprintf("traffic[%d].%s", i, f) }
		switch {
		case t.Latest && t.Revision != "":
			return &FieldError{at("revision"), "set either revision or latest, not both"}
		case !t.Latest && t.Revision == "":
			return &FieldError{at("revision"), fmt.Sprintf(`name a revision (%s) or set "latest": true`, RevisionName(function, 1))}
		case t.Revision != "":
			if fn, _, ok := RevisionOf(t.Revision); !ok || fn != function {
				return &FieldError{at("revision"), fmt.Sprintf("%q is not a revision of function %s; its revisions are named %s-<n>", t.Revision, function, function)}
			}
		}
		if t.Percent < 0 || t.Percent > 100 {
			return &FieldError{at("percent"), fmt.Sprintf("%d is out of range; use 0 to 100", t.Percent)}
		}
		sum += t.Percent
		if t.Tag != "" {
			if err := CheckTag(t.Tag); err != nil {
				return &FieldError{at("tag"), err.Error()}
			}
			if tags[t.Tag] {
				return &FieldError{at("tag"), fmt.Sprintf("tag %q is used twice; a tag names one revision", t.Tag)}
			}
			tags[t.Tag] = true
		}
	}
	if sum != 100 {
		return &FieldError{"traffic", fmt.Sprintf("percents sum to %d; they must sum to 100", sum)}
	}
	return nil
}

// RevisionState is what the traffic rules need to know of one revision.
type RevisionState struct {
	Name   string
	Number int64
	Phase  string // RevisionBuilding, RevisionReady or RevisionFailed
}

// CheckTrafficRevisions refuses traffic that names a revision the function does not have,
// or one whose build failed (it could never serve). A building one may be named: its share
// waits for it.
func CheckTrafficRevisions(targets []TrafficTarget, revisions []RevisionState) *FieldError {
	for i, t := range targets {
		if t.Revision == "" {
			continue
		}
		j := slices.IndexFunc(revisions, func(r RevisionState) bool { return r.Name == t.Revision })
		field := fmt.Sprintf("traffic[%d].revision", i)
		switch {
		case j < 0:
			return &FieldError{field, fmt.Sprintf("revision %s does not exist; list them with `sless revisions`", t.Revision)}
		case revisions[j].Phase == RevisionFailed:
			return &FieldError{field, fmt.Sprintf("revision %s failed and cannot serve; name a ready one", t.Revision)}
		}
	}
	return nil
}

// ResolvedTarget is a traffic entry with latest resolved: Revision is "" while no revision is
// ready.
type ResolvedTarget struct {
	Revision string `json:"revision"`
	Latest   bool   `json:"latest,omitempty"`
	Percent  int32  `json:"percent"`
	Tag      string `json:"tag,omitempty"`
}

// ResolveTraffic resolves latest to latestReady, the newest ready revision ("" for none).
func ResolveTraffic(targets []TrafficTarget, latestReady string) []ResolvedTarget {
	out := make([]ResolvedTarget, len(targets))
	for i, t := range targets {
		out[i] = ResolvedTarget(t)
		if t.Latest {
			out[i].Revision = latestReady
		}
	}
	return out
}

// DesiredTraffic is where a function's calls go: its traffic (none: DefaultTraffic) with
// latest resolved to latestReady (to the previous revision while rollout rolled
// latestReady back), latest's share split by a rollout in progress (nil: none).
func DesiredTraffic(targets []TrafficTarget, latestReady string, rollout *RolloutState) []ResolvedTarget {
	if len(targets) == 0 {
		targets = DefaultTraffic()
	}
	return ApplyRollout(ResolveTraffic(targets, LatestDuringRollout(latestReady, rollout)), rollout)
}

// LatestReady is the newest ready revision of revs ("" for none).
func LatestReady(revs []RevisionState) string {
	var best RevisionState
	for _, r := range revs {
		if r.Phase == RevisionReady && r.Number > best.Number {
			best = r
		}
	}
	return best.Name
}

// Shares is what a revision has of the resolved traffic: its percent (summed over entries)
// and its tags.
func Shares(resolved []ResolvedTarget, revision string) (percent int32, tags []string) {
	for _, t := range resolved {
		if t.Revision == revision && revision != "" {
			percent += t.Percent
			if t.Tag != "" {
				tags = append(tags, t.Tag)
			}
		}
	}
	return percent, tags
}

// Serving reports whether a revision must keep running: it has traffic or a tag.
func Serving(resolved []ResolvedTarget, revision string) bool {
	p, tags := Shares(resolved, revision)
	return p > 0 || len(tags) > 0
}

// PickTarget chooses the entry of targets (percents summing to 100) a call goes to: by key
// when one is given (the same key always lands on the same entry while the traffic stands),
// at random otherwise. It answers -1 for an empty table.
func PickTarget[T any](targets []T, percent func(*T) int32, key string) int {
	if len(targets) == 1 {
		return 0
	}
	var point int32
	if key != "" {
		h := fnv.New32a()
		_, _ = h.Write([]byte(key))
		point = int32(h.Sum32() % 100)
	} else {
		point = rand.Int32N(100)
	}
	last := -1
	for i := range targets {
		p := percent(&targets[i])
		if p <= 0 {
			continue
		}
		if point < p {
			return i
		}
		point -= p
		last = i
	}
	return last
}

// RollbackTarget is where `sless rollback` sends all traffic when no revision is named: the
// newest ready revision older than the newest one that has traffic now, which is the
// revision that served everything before the latest rollout (and, once rolled back, the one
// before that).
func RollbackTarget(revs []RevisionState, resolved []ResolvedTarget) (string, bool) {
	var newest int64
	for _, r := range revs {
		if p, _ := Shares(resolved, r.Name); p > 0 && r.Number > newest {
			newest = r.Number
		}
	}
	var best RevisionState
	for _, r := range revs {
		if r.Phase == RevisionReady && r.Number < newest && r.Number > best.Number {
			best = r
		}
	}
	return best.Name, best.Name != ""
}

// RevisionsToDelete lists the revisions garbage collection removes: beyond the newest keep
// revisions that neither serve (traffic or a tag) nor are the latest created or latest
// ready, oldest first.
func RevisionsToDelete(revs []RevisionState, resolved []ResolvedTarget, keep int) []string {
	sorted := slices.Clone(revs)
	slices.SortFunc(sorted, func(a, b RevisionState) int { return int(b.Number - a.Number) })
	latestReady := LatestReady(revs)
	var idle []string
	for i, r := range sorted {
		if i == 0 || r.Name == latestReady || Serving(resolved, r.Name) {
			continue
		}
		idle = append(idle, r.Name)
	}
	if len(idle) <= keep {
		return nil
	}
	out := idle[keep:]
	slices.Reverse(out)
	return out
}
