// Command pgtestenv runs a command against a throwaway PostgreSQL cluster.
//
// It starts a cluster from the machine's PostgreSQL binaries in a temporary
// directory (with fsync off: the data is disposable), sets
// QUITTANCE_TEST_DATABASE_URL to its maintenance database and
// QUITTANCE_TEST_CLUSTER_DIR to its data directory, runs the command, and
// exits with the command's exit code after stopping the cluster. make test
// runs the whole suite this way, so every test binary shares one server:
//
//	go run ./sql/pgtest/pgtestenv go test -race ./...
//
// The cluster's directory is removed afterwards, unless a failed test kept
// its database there (sql/pgtest logs how to connect). Such a cluster can be
// started again to look at it, and is then kept:
//
//	go run ./sql/pgtest/pgtestenv -dir /tmp/quittance-pgtest-… psql 'postgres://…'
//
// Interrupts (Ctrl-C) and termination requests are passed to the command;
// the cluster is stopped once the command has exited. If pgtestenv itself is
// killed, the server dies with it (on Linux).
//
// pgtestenv must never be used for anything but disposable data, and never
// leaves a server running after it exits.
package main
