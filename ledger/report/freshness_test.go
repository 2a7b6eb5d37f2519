package report_test

import (
	"context"
	"testing"
	"time"

	"github.com/quittance/quittance/ledger/report"
)

// TestFreshnessKeepsTheOldest: an answer built from several reads is as old
// as its oldest data, whatever order they came in; without WithRead
// nothing is recorded and nothing asks for the primary.
func TestFreshnessKeepsTheOldest(t *testing.T) {
	if _, ok := report.ReadFreshness(context.Background()); ok || report.StrongRead(context.Background()) {
		t.Fatal("a context without WithRead has freshness or asks for the primary")
	}
	report.RecordFreshness(context.Background(), report.Freshness{Standby: true}) // no-op, no panic

	primary := report.Freshness{}
	lagging := report.Freshness{Standby: true, Age: 3 * time.Second}
	fresh := report.Freshness{Standby: true}
	for _, order := range [][]report.Freshness{
		{primary, lagging, fresh},
		{lagging, primary},
		{fresh, lagging, primary},
	} {
		ctx := report.WithRead(context.Background(), false)
		if _, ok := report.ReadFreshness(ctx); ok {
			t.Fatal("freshness before any read")
		}
		for _, f := range order {
			report.RecordFreshness(ctx, f)
		}
		if got, ok := report.ReadFreshness(ctx); !ok || got != lagging {
			t.Errorf("after %v: %+v %v, want %+v", order, got, ok, lagging)
		}
	}
	if !report.StrongRead(report.WithRead(context.Background(), true)) {
		t.Error("WithRead(strong) does not ask for the primary")
	}
}
