package pgcluster

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ServiceRole is the group role migration 00015 grants the service's
// privileges to: the working tables, and only INSERT and SELECT on the
// audit log (ledger/AUDIT.md).
const ServiceRole = "quittance_service"

// ServiceLogin is the login role the service connects as on a cluster of
// this package (make run, the tests): a member of ServiceRole, owning
// nothing. Migrations run as Superuser, the owner of the schema.
const ServiceLogin = "quittance_app"

// EnsureServiceLogin creates ServiceRole and ServiceLogin on the server
// whose maintenance database adminURL names, if they are missing, and makes
// ServiceLogin a member of ServiceRole. Roles are cluster-wide, so this is
// done once per server, under an advisory lock: test binaries sharing a
// server call it at once. It needs a superuser (or CREATEROLE).
func EnsureServiceLogin(ctx context.Context, adminURL string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect to maintenance database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("create the service's roles: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	for _, q := range []string{
		"SELECT pg_advisory_xact_lock(hashtextextended('quittance:service-roles', 0))",
		// A migration may create ServiceRole meanwhile (00015), without
		// this lock: a duplicate is then no error.
		"DO $$ BEGIN " +
			"IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '" + ServiceRole + "') THEN " +
			"BEGIN CREATE ROLE " + ServiceRole + " NOLOGIN; EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END; " +
			"END IF; " +
			"IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '" + ServiceLogin + "') THEN CREATE ROLE " + ServiceLogin + " LOGIN; END IF; " +
			"IF NOT pg_has_role('" + ServiceLogin + "', '" + ServiceRole + "', 'MEMBER') THEN GRANT " + ServiceRole + " TO " + ServiceLogin + "; END IF; " +
			"END $$",
	} {
		if _, err := tx.Exec(ctx, q); err != nil {
			return fmt.Errorf("create the service's roles: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("create the service's roles: %w", err)
	}
	return nil
}
