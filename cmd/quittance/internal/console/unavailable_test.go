package console_test

import (
	"net/http"
	"net/url"
	"testing"
	"time"
)

// TestUnavailableIsTryAgain: while the database takes no writes (here, a
// database whose new sessions are read-only, as a standby answers before
// it is promoted), an on-call person's console action (already refused
// where its session is resolved, which writes) is answered 503 with
// Retry-After and a page that says nothing changed and to send it again,
// not an opaque internal error; nothing is recorded. Once the database
// takes writes again, the same action goes through.
func TestUnavailableIsTryAgain(t *testing.T) {
	w := newWorld(t)
	b := w.client(t)
	b.signIn(w.OncallToken)
	self := "/console/delegations/" + w.big.ID
	csrf := b.get(self).csrf(t)
	before := w.totalEvents(t)
	setReadOnly := func(on string) {
		t.Helper()
		// The sessions the last call terminated may still be in the pool:
		// it drops them all, here and after the terminations below, so the
		// test's own reads (and this call) take live ones.
		w.Pool.Reset()
		defer w.Pool.Reset()
		conn, err := w.Pool.Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		for _, sql := range []string{
			`SET default_transaction_read_only = off`,
			`DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET default_transaction_read_only = ` + on + `', current_database()); END $$`,
			// Every other session starts again, with the new setting.
			`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`,
		} {
			if _, err := conn.Exec(t.Context(), sql); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
		conn.Conn().Close(t.Context()) //nolint:errcheck // its session keeps the old setting; the pool opens another
	}
	setReadOnly("on")
	note := url.Values{"note": {"Called Bolt's ops desk again."}, "csrf": {csrf}}
	var res page
	// The first request after the terminations may meet a connection the
	// pool has not yet found closed: unavailable too.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		res = b.do(http.MethodPost, self+"/notes", note)
		if res.status == http.StatusServiceUnavailable || time.Now().After(deadline) {
			break
		}
	}
	if res.status != http.StatusServiceUnavailable || res.header.Get("Retry-After") != "1" {
		t.Fatalf("a note while the database takes no writes: %d, Retry-After %q\n%s", res.status, res.header.Get("Retry-After"), res.body)
	}
	res.contains(t, "Try again in a moment", "changed nothing")
	res.lacks(t, "Something went wrong")
	setReadOnly("off")
	if n := w.totalEvents(t); n != before {
		t.Fatalf("%d events recorded while the database took no writes", n-before)
	}
	var ok page
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if ok = b.do(http.MethodPost, self+"/notes", note); ok.status == http.StatusSeeOther || time.Now().After(deadline) {
			break
		}
	}
	if ok.status != http.StatusSeeOther {
		t.Fatalf("the note once the database takes writes again: %d\n%s", ok.status, ok.body)
	}
}
