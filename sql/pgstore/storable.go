package pgstore

import (
	"context"
	"encoding/json"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

// storableDB is the connection every statement of the store goes through:
// it passes each text and JSON parameter through ledger.StorableText and
// ledger.StorableJSON before PostgreSQL sees it. Remote text reaches many
// columns (status messages, task snapshots, receipts, the error texts of
// remote replies, agent card fields, follow-up replies), and PostgreSQL
// refuses a NUL or invalid UTF-8 in any of them: one such character would
// fail the write on every retry, wedging the job that makes it. Cleaning
// here, where every parameter passes, covers every column, including ones
// added later. Parameters are matched by Go type: string, *string and
// []string are text; json.RawMessage is json or jsonb (sqlc maps both
// to it); []byte is bytea and passes untouched. An event is cleaned before
// it is hashed (ledger.StorableEvent), so cleaning it again here changes
// nothing.
type storableDB struct{ db dbsqlc.DBTX }

// newQueries returns the sqlc queries on db, through storableDB and
// unavailableDB.
func newQueries(db dbsqlc.DBTX) *dbsqlc.Queries { return dbsqlc.New(storableDB{withUnavailable(db)}) }

func (s storableDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return s.db.Exec(ctx, sql, storableArgs(args)...)
}

func (s storableDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return s.db.Query(ctx, sql, storableArgs(args)...)
}

func (s storableDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return s.db.QueryRow(ctx, sql, storableArgs(args)...)
}

// storableArgs returns args with text and JSON cleaned; args itself is not
// modified.
func storableArgs(args []any) []any {
	var out []any
	set := func(i int, v any) {
		if out == nil {
			out = append([]any(nil), args...)
		}
		out[i] = v
	}
	for i, a := range args {
		switch v := a.(type) {
		case string:
			if c, changed := ledger.StorableText(v); changed {
				set(i, c)
			}
		case *string:
			if v == nil {
				continue
			}
			if c, changed := ledger.StorableText(*v); changed {
				set(i, &c)
			}
		case []string:
			var cleaned []string
			for j, s := range v {
				if c, changed := ledger.StorableText(s); changed {
					if cleaned == nil {
						cleaned = append([]string(nil), v...)
					}
					cleaned[j] = c
				}
			}
			if cleaned != nil {
				set(i, cleaned)
			}
		case json.RawMessage:
			if len(v) == 0 {
				continue
			}
			// JSON that does not parse is left for PostgreSQL to refuse:
			// it is a program error, not remote text.
			if c, changed, err := ledger.StorableJSON(v); err == nil && changed {
				set(i, c)
			}
		}
	}
	if out == nil {
		return args
	}
	return out
}

// storableJSONText is raw as a text element of an array parameter (a
// batch's unnest, which casts it back to json or jsonb), cleaned as
// storableArgs cleans a json.RawMessage: array elements are text to
// storableArgs, so the JSON is cleaned here. Empty stays empty (the
// batch's NULL).
func storableJSONText(raw []byte) string {
	if len(raw) == 0 {
		return ""
	}
	if c, changed, err := ledger.StorableJSON(raw); err == nil && changed {
		return string(c)
	}
	return string(raw)
}
