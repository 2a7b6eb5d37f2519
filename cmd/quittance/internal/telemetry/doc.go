// Package telemetry holds Quittance's Prometheus metrics that are counted in
// the process: obligation transitions and evidence (derived from the events
// of committed transactions only), compensation requests, write-offs, HTTP
// request durations, and outbound A2A call durations, together with the
// http.RoundTripper that records the latter and propagates the W3C
// traceparent header.
//
// Metrics that describe the database (open obligations, held amounts, the
// oldest open obligation) are not here: sql/pgstore's Collector reads them
// at scrape time.
//
// This package must never register anything on Prometheus's global
// registry, never put an id (delegation, org, task, token) in a label, and
// never count an event before its transaction committed.
package telemetry
