package httpapi_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/ledger"
)

// TestEventRecordEncodesAsTheLedgers: the API's event record encodes byte
// for byte as ledger.EventRecord, the form webhook deliveries carry and
// verify-chain decodes, with every field set and with the optional ones
// empty.
func TestEventRecordEncodesAsTheLedgers(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)
	for _, r := range []ledger.EventRecord{
		{
			Seq: 42, Stream: "delegation:0195f0b4-6a3c-7c7e-9d3e-2b1f4a5c6d7e", StreamSeq: 3,
			DelegationID: "0195f0b4-6a3c-7c7e-9d3e-2b1f4a5c6d7e", Type: ledger.EventTypeCompensationAcked, At: at,
			Actor: "org:acme", ObligationFrom: ledger.ObligationRevocationPendingCompensation, ObligationTo: ledger.ObligationCompensated,
			Data: json.RawMessage(`{"kind":"compensation-ack+jwt"}`), Evidence: "eyJ.eyJ.sig", PrevHash: "ab", Hash: "cd",
		},
		{Seq: 1, Stream: "budget:ops", StreamSeq: 1, Type: ledger.EventTypeBudgetFunded, At: at, Actor: "token:oncall"},
	} {
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := json.Marshal(httpapi.EventRecord(r))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("API event record\n%s\nwant the ledger's\n%s", got, want)
		}
	}
}
