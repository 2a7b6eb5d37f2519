package pgstore

import (
	"context"
	"fmt"

	"github.com/quittance/quittance/ledger"
)

// TaskClasses returns every registered task class, by name.
func (r reader) TaskClasses(ctx context.Context) ([]ledger.TaskClass, error) {
	rows, err := r.q.TaskClassList(ctx)
	if err != nil {
		return nil, fmt.Errorf("list task classes: %w", interpretError(err))
	}
	out := make([]ledger.TaskClass, len(rows))
	for i, row := range rows {
		out[i] = toTaskClass(row)
	}
	return out, nil
}
