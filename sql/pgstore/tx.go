package pgstore

import (
	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/ledger"
)

// tx implements ledger.Tx on one pgx transaction.
type tx struct {
	reader
	appended []ledger.Event
}

// A transaction implements the Tx of every domain that writes through it.
var (
	_ ledger.Tx       = (*tx)(nil)
	_ compensation.Tx = (*tx)(nil)
	_ delegate.Tx     = (*tx)(nil)
)
