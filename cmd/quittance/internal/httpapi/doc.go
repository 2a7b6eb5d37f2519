// Package httpapi is Quittance's HTTP surface: the JSON API for
// orchestrators, finance and on-call, the endpoints remote orgs post signed
// evidence to, and the health probes. Operations are declared with huma, so
// the OpenAPI 3.1 document at /openapi.json is generated from the handlers
// themselves.
//
// Handlers translate between JSON and the domain services and nothing more:
// they never import the store, and every domain error is mapped to an HTTP
// status and an RFC 9457 problem in one place (problems.go). Internal error
// text never reaches a client.
package httpapi
