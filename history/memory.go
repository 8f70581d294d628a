package history

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"
)

// DefaultMemoryCapacity is the number of records Memory keeps when NewMemory gets 0.
const DefaultMemoryCapacity = 10000

// Memory is a bounded in-memory Recorder and Reader for `sless dev` without a database: a
// global ring that overwrites the oldest record once full, so memory stays flat. The usage
// rollups of the records are kept apart from the ring and never evicted: one entry per
// function and hour.
type Memory struct {
	mu     sync.Mutex
	ring   []Record
	next   int // ring index the next record goes to
	lastID int64
	usage  map[usageKey]Usage
}

var (
	_ Recorder = (*Memory)(nil)
	_ Reader   = (*Memory)(nil)
)

// NewMemory returns a store keeping the newest capacity records (DefaultMemoryCapacity if 0).
func NewMemory(capacity int) *Memory {
	if capacity <= 0 {
		capacity = DefaultMemoryCapacity
	}
	return &Memory{ring: make([]Record, 0, capacity), usage: map[usageKey]Usage{}}
}

// Record stores r, evicting the oldest record when full.
func (m *Memory) Record(r Record) {
	r = sanitize(r)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lastID++
	r.ID = m.lastID
	k := usageKeyOf(r)
	sum := m.usage[k]
	sum.Add(usageOf(r))
	m.usage[k] = sum
	if len(m.ring) < cap(m.ring) {
		m.ring = append(m.ring, r)
		return
	}
	m.ring[m.next] = r
	m.next = (m.next + 1) % len(m.ring)
}

// List returns one page of q.Namespace (and q.Function if set), newest first.
func (m *Memory) List(_ context.Context, q Query) (Page, error) {
	q, after, err := q.normalize()
	if err != nil {
		return Page{}, err
	}
	m.mu.Lock()
	var match []Record
	for _, r := range m.ring {
		if r.Namespace == q.Namespace && (q.Function == "" || r.Function == q.Function) && after.before(r) {
			match = append(match, r)
		}
	}
	m.mu.Unlock()
	slices.SortFunc(match, func(a, b Record) int {
		if c := b.Start.Compare(a.Start); c != 0 {
			return c
		}
		return cmp.Compare(b.ID, a.ID)
	})
	return page(match, q.Limit), nil
}

// RevisionOutcomes counts a revision's outcomes since a time among the records kept.
func (m *Memory) RevisionOutcomes(_ context.Context, ns, function, revision string, since time.Time) (Summary, error) {
	var s Summary
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.ring {
		if r.Namespace == ns && r.Function == function && r.Revision == revision && !r.Start.Before(since) {
			s.addOutcomes(r.HTTPStatus, 1)
		}
	}
	return s, nil
}

// Stats summarizes q's invocations among the records kept: only the newest capacity, so on
// a busy day the older buckets come out short.
func (m *Memory) Stats(_ context.Context, q StatsQuery) (Stats, error) {
	q, start, end, err := q.bounds()
	if err != nil {
		return Stats{}, err
	}
	s := newStats(q.Window, start, end)
	micros := make([][]float64, len(s.Buckets))
	errs := make([]int64, len(s.Buckets))
	var all []float64
	var allErrs int64
	m.mu.Lock()
	for _, r := range m.ring {
		i := s.bucketOf(r.Start)
		if i < 0 || r.Namespace != q.Namespace || q.Function != "" && r.Function != q.Function {
			continue
		}
		us := float64(r.Duration.Microseconds())
		micros[i], all = append(micros[i], us), append(all, us)
		if r.Status != StatusSucceeded {
			errs[i]++
			allErrs++
		}
	}
	m.mu.Unlock()
	for i := range s.Buckets {
		s.Buckets[i].Summary = summarize(micros[i], errs[i])
	}
	s.Total = summarize(all, allErrs)
	return s, nil
}

// Usage sums the rollups of q's namespace and window per group.
func (m *Memory) Usage(_ context.Context, q UsageQuery) (UsageReport, error) {
	q, err := q.bounds()
	if err != nil {
		return UsageReport{}, err
	}
	from, to := q.From.Unix(), q.To.Unix()
	groups := map[UsageRow]Usage{}
	m.mu.Lock()
	for k, u := range m.usage {
		if k.namespace == q.Namespace && k.hour >= from && k.hour < to {
			g := q.By.group(k.function, time.Unix(k.hour, 0).UTC())
			sum := groups[g]
			sum.Add(u)
			groups[g] = sum
		}
	}
	m.mu.Unlock()
	rows := make([]UsageRow, 0, len(groups))
	for g, u := range groups {
		g.Usage = u
		rows = append(rows, g)
	}
	return q.report(rows), nil
}

// page cuts newest-first records (at most limit+1 of interest) into a Page.
func page(records []Record, limit int) Page {
	if records == nil {
		records = []Record{} // JSON clients get [] rather than null
	}
	if len(records) <= limit {
		return Page{Records: records}
	}
	records = records[:limit]
	return Page{Records: records, Next: cursorOf(records[limit-1])}
}
