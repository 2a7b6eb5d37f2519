// Package pgstore is Quittance's PostgreSQL store: it implements the
// ledger's Store over pgx and the sqlc-generated queries in
// sql/internal/dbsqlc, mapping rows to domain types and PostgreSQL errors to
// domain errors in one place (interpretError).
//
// Each query file of sql/queries has a Go file of the same name here that
// maps its rows (delegations.go for delegations.sql, and so on); store.go
// holds the Store, its transactions and the views other domains use.
//
// It holds no business rules: every decision is made by the domain packages
// and written here. Times are never read from a clock here; callers pass the
// time to record.
package pgstore
