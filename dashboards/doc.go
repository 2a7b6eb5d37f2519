// Package dashboards holds Quittance's operational monitoring as data: the Grafana
// dashboards (grafana/*.json), their Grafana provisioning files (grafana/provisioning),
// the Prometheus alerting rules (alerts/quittance.rules.yaml, with promtool unit tests
// beside them) and one runbook per alert (runbooks/).
//
// The Go code only embeds those files and reports which metrics and queries they use, so
// that tests can compare the dashboards and alerts against the metrics the service really
// registers, and evaluate the panels' queries against a real Prometheus (promtest runs
// one). The dashboard JSON files are the source: edit them directly (or export
// from Grafana) and keep panel ids unique and the datasource uid provisioned.
//
// This package must never import the service's packages, register metrics, or touch the
// network or a database: it is read by tests and by tooling, never by the running
// service.
package dashboards
