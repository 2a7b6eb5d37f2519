package audit

import (
	"fmt"
	"slices"
	"time"

	"github.com/quittance/quittance/ledger"
)

// CheckpointTimeSlack is how much earlier than a checkpoint that did not
// include it an event may be dated (CheckDatedAfterCheckpoints,
// CheckpointTimeline). More than EventTimeSlack: a checkpoint signs only
// events no open transaction can precede in the feed, so one transaction
// held open anywhere on the database server (a long report, a dump) keeps
// events committed meanwhile out of the checkpoints signed then, and their
// dates fall behind those checkpoints by as long as it stayed open. Ten
// minutes is the same bound verify-chain's --max-unanchored-age assumes.
const CheckpointTimeSlack = 10 * time.Minute

// CheckDatedAfterCheckpoints checks one stream's events (in stream order)
// against the signed time of checkpoints that did not include them: an
// event that no checkpoint up to j included was committed after j began
// to be signed, or at most as long before as its transaction was open
// then, so it cannot be dated more than slack (EventTimeSlack) before j's
// time. An event dated earlier was appended later with a backdated time;
// the chain alone cannot tell, since an event appended at the tail links
// like any other. checkpoints are verified checkpoints of the ledger, any
// of them, in any order: one that lists the stream did not include the
// events after the head it signed; one that does not list it but is newer
// than every given one that does did not include the events after the
// latest head signed. Any other is skipped, as which head the stream had
// then is not known without every checkpoint before it. It returns one
// problem per event so dated.
func CheckDatedAfterCheckpoints(stream string, events []ledger.Event, checkpoints []CheckpointPayload, slack time.Duration) []string {
	sorted := slices.SortedFunc(slices.Values(checkpoints), func(a, b CheckpointPayload) int { return int(a.ID - b.ID) })
	type bound struct {
		head int32 // the stream's head as the checkpoint signed it
		cp   CheckpointPayload
	}
	var (
		bounds []bound
		latest = bound{head: -1} // the latest head signed, and by which checkpoint
	)
	for _, cp := range sorted {
		i := slices.IndexFunc(cp.Streams, func(h StreamHead) bool { return h.Stream == stream })
		if i >= 0 {
			latest = bound{cp.Streams[i].Seq, cp}
			bounds = append(bounds, latest)
		}
	}
	if n := len(sorted); n > 0 && latest.head >= 0 && sorted[n-1].ID > latest.cp.ID {
		bounds = append(bounds, bound{latest.head, sorted[n-1]})
	}
	var problems []string
	for _, e := range events {
		var notIn *CheckpointPayload // the newest checkpoint that did not include e
		for i := range bounds {
			if bounds[i].head < e.StreamSeq && (notIn == nil || bounds[i].cp.At.After(notIn.At)) {
				notIn = &bounds[i].cp
			}
		}
		if notIn != nil && e.At.Before(notIn.At.Add(-slack)) {
			problems = append(problems, backdated(e, notIn.ID, notIn.At, slack))
		}
	}
	return problems
}

// CheckpointTimeline is every checkpoint of the ledger, added oldest first,
// kept as what the dating rule of CheckDatedAfterCheckpoints needs when all
// of them are at hand (verify-chain): when each was signed, and for each
// stream the heads signed for it and by which checkpoint. With every
// checkpoint known, the checkpoint just before the first that included an
// event is the newest that did not, so the rule is exact for every event;
// a stream's events after its latest signed head are bounded by the newest
// checkpoint of all. Its size follows the heads signed, not the events.
type CheckpointTimeline struct {
	signed   map[int64]time.Time
	latest   int64
	listings map[string][]signedAt
}

// signedAt is a stream's head as checkpoint id signed it.
type signedAt struct {
	head int32
	id   int64
}

// Add records a verified checkpoint; checkpoints are added oldest first.
func (t *CheckpointTimeline) Add(p CheckpointPayload) {
	if t.signed == nil {
		t.signed, t.listings = map[int64]time.Time{}, map[string][]signedAt{}
	}
	t.signed[p.ID] = p.At
	t.latest = max(t.latest, p.ID)
	for _, h := range p.Streams {
		t.listings[h.Stream] = append(t.listings[h.Stream], signedAt{h.Seq, p.ID})
	}
}

// Check returns one problem per event of stream (in stream order) dated
// more than slack before the checkpoint just before the first that
// included it — or, for an event no checkpoint included, before the
// latest checkpoint: that checkpoint did not include it, so it was
// committed after the checkpoint began to be signed (or its transaction
// was open then), and an earlier date is a backdated one.
func (t *CheckpointTimeline) Check(stream string, events []ledger.Event, slack time.Duration) []string {
	if t.latest == 0 {
		return nil
	}
	listed := t.listings[stream]
	var problems []string
	for _, e := range events {
		// The first checkpoint that included e, or none.
		first := int64(0)
		if i := slices.IndexFunc(listed, func(l signedAt) bool { return l.head >= e.StreamSeq }); i >= 0 {
			first = listed[i].id
		}
		notIn := t.latest
		if first != 0 {
			notIn = first - 1
		}
		if at, known := t.signed[notIn]; known && e.At.Before(at.Add(-slack)) {
			problems = append(problems, backdated(e, notIn, at, slack))
		}
	}
	return problems
}

// backdated is the problem of event e, dated more than slack before
// checkpoint id, signed at, which did not include it.
func backdated(e ledger.Event, id int64, at time.Time, slack time.Duration) string {
	return fmt.Sprintf("event %d (%s) is dated %s, %s before checkpoint %d (signed %s), which did not include it: "+
		"it was appended after, with a backdated time (more than %s earlier)", e.StreamSeq, e.Type,
		e.At.UTC().Format(time.RFC3339Nano), at.Sub(e.At), id, at.UTC().Format(time.RFC3339Nano), slack)
}
