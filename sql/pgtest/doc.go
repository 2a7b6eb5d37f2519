// Package pgtest gives each test its own PostgreSQL database with
// Quittance's schema applied, on a real server; there are no database mocks.
//
// URL and Pool create a database per test by cloning a template database
// (CREATE DATABASE … TEMPLATE tpl_<hash>). The template is built once per
// server and per migrations hash, a SHA-256 over the embedded migration
// files, so changing a migration yields a new template and an unchanged
// schema costs nothing. Test binaries of different packages may race to
// build the same template: a PostgreSQL advisory lock on the maintenance
// database serializes them, the template is migrated under a temporary name
// and renamed only when complete, and it refuses connections, so cloning
// never fails because a session is connected to it.
//
// When a test passes, its database is dropped. When it fails, the database
// is kept and the test log says how to connect to it with psql.
//
// # Where the server comes from
//
// If QUITTANCE_TEST_DATABASE_URL is set, it is the URL of a maintenance
// database (such as postgres://postgres@127.0.0.1:5432/postgres) on a
// running server whose role may create databases; every test binary shares
// it. The pgtestenv program sets it: it starts a throwaway cluster, runs a
// command such as go test, and removes the cluster afterwards. make test
// uses it:
//
//	go run ./sql/pgtest/pgtestenv go test -race ./...
//
// If the variable is unset, as when a single package is tested by hand with
// go test ./ledger/, the first test that needs a database starts a
// throwaway cluster for its test binary from the machine's PostgreSQL
// binaries (see sql/pgcluster). The server is a child of the test binary
// and gets a parent-death signal, so it cannot outlive it, whether the
// binary exits, times out or is killed. No TestMain is needed. The
// cluster's temporary directory is removed by the next run, unless a failed
// test kept a database in it.
//
// Cluster starts a private cluster for one test, which that test may
// restart or crash (fault injection) without disturbing the tests that
// share the server.
//
// Replicated starts a private primary and its synchronous streaming
// standby for one test; Pair.URL names both for target_session_attrs=
// read-write, and Pair.Failover kills the primary and promotes the
// standby (failover tests). Patroni starts two servers under Patroni with
// a local etcd (installing the patroni, python3-etcd and etcd-server
// packages with apt-get when missing, as root), so that the promotion is
// Patroni's decision; PatroniPair.Failover kills the leader's node.
//
// This package must never be imported by non-test code, never touch a
// database it did not create, and never connect to a server other than the
// one named by QUITTANCE_TEST_DATABASE_URL or a cluster it started itself.
package pgtest
