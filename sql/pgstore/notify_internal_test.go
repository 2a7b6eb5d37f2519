package pgstore

import (
	"sync"
	"testing"
	"time"
)

// sentNotification is one notification a notifier under test sent.
type sentNotification struct {
	at       time.Time
	webhooks bool
}

// recordingNotifier is a notifier whose notifications are recorded, not
// sent to PostgreSQL.
type recordingNotifier struct {
	notifier
	sentMu sync.Mutex
	sent   []sentNotification
}

func newRecordingNotifier(interval time.Duration) *recordingNotifier {
	r := &recordingNotifier{}
	r.interval = interval
	r.send = func(webhooks bool) {
		r.sentMu.Lock()
		defer r.sentMu.Unlock()
		r.sent = append(r.sent, sentNotification{at: time.Now(), webhooks: webhooks})
	}
	return r
}

// sentSoFar is what the notifier has sent so far.
func (r *recordingNotifier) sentSoFar() []sentNotification {
	r.sentMu.Lock()
	defer r.sentMu.Unlock()
	return append([]sentNotification(nil), r.sent...)
}

// isRunning: the notifier is sending, or waiting out its interval.
func (r *recordingNotifier) isRunning() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.running
}

// settled waits until the notifier has nothing left to send, and returns
// what it sent.
func (r *recordingNotifier) settled(t *testing.T) []sentNotification {
	t.Helper()
	within(t, 10*time.Second, "the notifier to be done after the last commit", func() bool { return !r.isRunning() })
	return r.sentSoFar()
}

// within polls cond every millisecond until it holds, or fails the test
// after d, saying what it waited for.
func within(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", d, what)
		}
	}
}

// TestNotifierSendsOneNotificationAnInterval: commits far more frequent
// than the interval share notifications, at most one an interval; the
// last commit is still announced, and a commit that queued webhook
// deliveries is announced as one by a notification that follows it.
func TestNotifierSendsOneNotificationAnInterval(t *testing.T) {
	t.Parallel()
	const interval = 50 * time.Millisecond
	r := newRecordingNotifier(interval)
	var webhookCommit, lastCommit time.Time
	commits := 0
	for start := time.Now(); time.Since(start) < 10*interval; commits++ {
		deliveries := commits == 100
		if deliveries {
			webhookCommit = time.Now()
		}
		lastCommit = time.Now()
		r.committed(deliveries)
		time.Sleep(50 * time.Microsecond)
	}
	sent := r.settled(t)
	if commits < 100 {
		t.Fatalf("only %d commits in %s; the test needs at least 100", commits, 10*interval)
	}
	if len(sent) < 2 || len(sent) > 13 {
		t.Fatalf("%d commits over %s sent %d notifications, want between 2 and 13 (one each %s)", commits, 10*interval, len(sent), interval)
	}
	for i := 1; i < len(sent); i++ {
		if gap := sent[i].at.Sub(sent[i-1].at); gap < interval {
			t.Errorf("notifications %d and %d only %s apart, want at least %s", i-1, i, gap, interval)
		}
	}
	if last := sent[len(sent)-1].at; last.Before(lastCommit) {
		t.Errorf("the last notification (%s) came before the last commit (%s): that commit was never announced", last.Format(time.StampMicro), lastCommit.Format(time.StampMicro))
	}
	announced := false
	for _, n := range sent {
		announced = announced || (n.webhooks && !n.at.Before(webhookCommit))
	}
	if !announced {
		t.Errorf("the commit that queued webhook deliveries at %s was announced by no webhook notification after it: %v", webhookCommit.Format(time.StampMicro), sent)
	}
}

// TestNotifierAnnouncesAQuietCommitAtOnce: the first commit after a quiet
// interval does not wait for the interval.
func TestNotifierAnnouncesAQuietCommitAtOnce(t *testing.T) {
	t.Parallel()
	const interval = 2 * time.Second
	r := newRecordingNotifier(interval)
	r.committed(false)
	within(t, interval/2, "a notification after a commit on a quiet notifier", func() bool { return len(r.sentSoFar()) > 0 })
	if sent := r.settled(t); len(sent) != 1 || sent[0].webhooks {
		t.Fatalf("one commit without deliveries sent %v, want one notification without webhooks", sent)
	}
}
