package pgstore

import (
	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/ledger"
)

// tx is one pgx transaction. It has every statement a transaction may
// run, so it implements the Tx of each domain that writes through it; each
// domain's Tx declares only the part that domain uses.
type tx struct {
	reader
	// conn queues the writes whose only result is whether they matched
	// (txConn.queue).
	conn     *txConn
	appended []ledger.Event
}

var (
	_ ledger.Tx       = (*tx)(nil)
	_ compensation.Tx = (*tx)(nil)
	_ delegate.Tx     = (*tx)(nil)

	_ delegate.OrchestratorTx = (*tx)(nil)
)
