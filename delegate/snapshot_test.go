package delegate

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/quittance/quittance/delegate/a2a"

	"github.com/quittance/quittance/ledger"
)

func TestSnapshotAppliesChunksInOrder(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	limits := SnapshotLimits{MaxArtifactBytes: 200, MaxTotalBytes: 400}
	chunk := func(id, text string, appendChunk, last bool) a2a.ArtifactUpdate {
		return a2a.ArtifactUpdate{TaskID: "t1", Artifact: a2a.Artifact{ArtifactID: id, Name: "n-" + id, Parts: []a2a.Part{{Text: text}}}, Append: appendChunk, LastChunk: last}
	}
	var s TaskSnapshot
	s = s.ApplyStatus(a2a.StatusUpdate{TaskID: "t1", Status: a2a.TaskStatus{State: a2a.TaskStateWorking, Message: &a2a.Message{Parts: []a2a.Part{{Text: "working"}}}}}, "stream", now)
	s = s.ApplyArtifactUpdate(chunk("a", "one ", false, false), "stream", now, limits)
	s = s.ApplyArtifactUpdate(chunk("b", "other", false, true), "stream", now, limits)
	if s.Artifacts[0].Complete {
		t.Fatal("an artifact without its last chunk is complete")
	}
	s = s.ApplyArtifactUpdate(chunk("a", "two ", true, false), "stream", now, limits)
	s = s.ApplyArtifactUpdate(chunk("a", "three", true, true), "stream", now, limits)
	if len(s.Artifacts) != 2 || s.Artifacts[0].ArtifactID != "a" || s.Artifacts[1].ArtifactID != "b" {
		t.Fatalf("artifacts = %+v", s.Artifacts)
	}
	var text strings.Builder
	for _, p := range s.Artifacts[0].Parts {
		text.WriteString(p.Text)
	}
	if text.String() != "one two three" || !s.Artifacts[0].Complete || s.StatusMessage.Text != "working" {
		t.Fatalf("assembled %q, snapshot %+v", text.String(), s)
	}
	// A chunk without append replaces the artifact.
	s = s.ApplyArtifactUpdate(chunk("b", "replaced", false, true), "stream", now, limits)
	if len(s.Artifacts[1].Parts) != 1 || s.Artifacts[1].Parts[0].Text != "replaced" {
		t.Fatalf("replaced artifact = %+v", s.Artifacts[1])
	}

	// Growing past the per-artifact bound keeps a marker and the size.
	big := strings.Repeat("x", 150)
	s = s.ApplyArtifactUpdate(chunk("c", big, false, false), "stream", now, limits)
	if s.Artifacts[2].TooLarge {
		t.Fatal("marked too large early")
	}
	s = s.ApplyArtifactUpdate(chunk("c", big, true, true), "stream", now, limits)
	c := s.Artifacts[2]
	if !c.TooLarge || len(c.Parts) != 0 || c.SizeBytes < 300 || !c.Complete || c.Name != "n-c" {
		t.Fatalf("oversized artifact = %+v", c)
	}
	raw, _ := json.Marshal(s)
	if !strings.Contains(string(raw), `"too_large":true`) || strings.Contains(string(raw), big) {
		t.Fatalf("snapshot JSON %s", raw)
	}
	// A fetched task replaces everything, within the same bounds.
	s = s.ApplyTask(a2a.Task{ID: "t1", Status: a2a.TaskStatus{State: a2a.TaskStateCompleted}, Artifacts: []a2a.Artifact{
		{ArtifactID: "a", Parts: []a2a.Part{{Text: "final"}}}, {ArtifactID: "huge", Parts: []a2a.Part{{Text: strings.Repeat("y", 500)}}},
	}}, "poll", now, limits)
	if s.State != ledger.StatusCompleted || len(s.Artifacts) != 2 || !s.Artifacts[1].TooLarge || s.Artifacts[0].TooLarge || s.StatusMessage != nil {
		t.Fatalf("after a fetched task: %+v", s)
	}
}

// A poll answered before a newer reply was recorded carries an older
// status: it does not take the newer snapshot's status or artifacts away.
func TestSnapshotKeepsNewerThanAnOlderFetch(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 6, 8, 31, 21, 0, time.UTC)
	limits := SnapshotLimits{MaxArtifactBytes: 200, MaxTotalBytes: 400}
	asked := a2a.Task{ID: "t1", Status: a2a.TaskStatus{State: a2a.TaskStateInputRequired, Timestamp: at}}
	done := a2a.Task{ID: "t1", Status: a2a.TaskStatus{State: a2a.TaskStateCompleted, Timestamp: at.Add(300 * time.Millisecond)},
		Artifacts: []a2a.Artifact{{ArtifactID: "r", Parts: []a2a.Part{{Text: "PO-42 charged to CC-42"}}}}}
	var s TaskSnapshot
	s = s.ApplyTask(done, "message_reply", at.Add(time.Second), limits)
	s = s.ApplyTask(asked, "poll", at.Add(2*time.Second), limits)
	if s.State != ledger.StatusCompleted || len(s.Artifacts) != 1 || s.Source != "message_reply" {
		t.Fatalf("an older fetch replaced the snapshot: %+v", s)
	}
	later := a2a.Task{ID: "t1", Status: a2a.TaskStatus{State: a2a.TaskStateCompleted, Timestamp: at.Add(time.Second)}, Artifacts: done.Artifacts}
	if s = s.ApplyTask(later, "poll", at.Add(3*time.Second), limits); s.Source != "poll" {
		t.Fatalf("a newer fetch did not replace the snapshot: %+v", s)
	}
}
