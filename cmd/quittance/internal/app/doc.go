// Package app builds Quittance: the store, the services, the A2A worker and
// orchestrator, webhook deliveries and the HTTP API, wired to one another
// the one way the service runs. The quittance binary builds it from its
// configuration; the API tests build the same graph on a test database,
// changing only what Config lets them change (the clock, the egress policy,
// intervals and attempts).
//
// It only builds: it starts no goroutine, opens no listener and runs no
// migration — the caller decides what runs, and for how long. It must never
// grow a second way to wire a part, and nothing outside cmd/quittance may
// import it.
package app
