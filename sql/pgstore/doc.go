// Package pgstore is Quittance's PostgreSQL store: it implements the
// ledger's Store over pgx and the sqlc-generated queries in
// sql/internal/dbsqlc, mapping rows to domain types and PostgreSQL errors to
// domain errors in one place (interpretError).
//
// It holds no business rules: every decision is made by the domain packages
// and written here. Times are never read from a clock here; callers pass the
// time to record.
package pgstore
