// Package pgcluster runs a private PostgreSQL cluster from the PostgreSQL
// binaries installed on the machine. The development server (make run) keeps
// its data in one under ./.quittance/, and the test harness in sql/pgtest
// starts throwaway ones.
//
// A cluster is created with initdb on first use (UTF8, superuser postgres,
// trust authentication) and then run as a child process of the caller:
// postgres itself, not a daemon started by pg_ctl. On Linux the child gets a
// parent-death signal, so the server cannot outlive the process that started
// it, even when that process is killed. When the caller runs as root, the
// data directory is owned by, and the server runs as, the postgres OS user,
// because PostgreSQL refuses to run as root.
//
// StartStandby makes a streaming standby of a running cluster (pg_basebackup
// -R) on another loopback port; Kill, Promote and RequireSynchronousStandby
// are what failover tests do to the pair.
//
// Trust authentication is safe only because the server listens on 127.0.0.1
// and on a unix socket inside the data directory. This package must never
// make a cluster listen on any other address, must never be used for
// production data, and must never install anything unless its caller asks
// for it through InstallBinaries.
package pgcluster
